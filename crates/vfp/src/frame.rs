//! A frame buffer with headroom, so that VXLAN encapsulation can prepend its outer headers
//! without moving the packet or allocating.

/// Headroom reserved in front of a frame: enough for an Ethernet + IPv6 + UDP + VXLAN outer
/// header (70 bytes) with room to spare.
pub const DEFAULT_HEADROOM: usize = 128;

/// An Ethernet frame being processed: the bytes live in `buf[start..end]`; the bytes before
/// `start` are headroom for encapsulation. The buffer keeps its length between frames, so a
/// device read into it ([`Frame::read_with`]) neither allocates nor clears memory.
#[derive(Debug, Clone)]
pub struct Frame {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl PartialEq for Frame {
    fn eq(&self, other: &Frame) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for Frame {}

impl Frame {
    /// Copies `bytes` into a new buffer with the default headroom.
    pub fn new(bytes: &[u8]) -> Frame {
        let mut buf = Vec::with_capacity(DEFAULT_HEADROOM + bytes.len());
        buf.resize(DEFAULT_HEADROOM, 0);
        buf.extend_from_slice(bytes);
        let end = buf.len();
        Frame {
            buf,
            start: DEFAULT_HEADROOM,
            end,
        }
    }

    /// Wraps a buffer whose first `headroom` bytes are free space and whose rest is the frame.
    /// A `headroom` larger than the buffer is clamped to an empty frame.
    pub fn from_vec(buf: Vec<u8>, headroom: usize) -> Frame {
        let start = headroom.min(buf.len());
        let end = buf.len();
        Frame { buf, start, end }
    }

    /// Replaces the frame's contents, keeping the default headroom and reusing the allocation.
    pub fn set(&mut self, bytes: &[u8]) {
        self.buf.truncate(DEFAULT_HEADROOM.min(self.buf.len()));
        self.buf.resize(DEFAULT_HEADROOM, 0);
        self.buf.extend_from_slice(bytes);
        self.start = DEFAULT_HEADROOM;
        self.end = self.buf.len();
    }

    /// Fills the frame from a device: `read` gets the buffer from `prefix` bytes before the
    /// default headroom's end, room for `prefix + capacity` bytes, and returns how many it
    /// wrote. The first `prefix` of them (a device header) stay readable through
    /// [`Frame::prefix`] until the frame is encapsulated; the rest is the frame. The buffer
    /// is grown once, to the largest capacity asked, and never cleared.
    pub fn read_with<E>(
        &mut self,
        prefix: usize,
        capacity: usize,
        read: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<(), E> {
        let prefix = prefix.min(DEFAULT_HEADROOM);
        let want = DEFAULT_HEADROOM + capacity;
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        let from = DEFAULT_HEADROOM - prefix;
        let n = read(&mut self.buf[from..want])?;
        self.start = DEFAULT_HEADROOM;
        self.end = (from + n).max(DEFAULT_HEADROOM).min(want);
        Ok(())
    }

    /// The `n` bytes in front of the frame (a device header read by [`Frame::read_with`]).
    pub fn prefix(&self, n: usize) -> &[u8] {
        &self.buf[self.start.saturating_sub(n)..self.start]
    }

    /// The frame bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The frame bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.end]
    }

    /// `bytes_mut` for the engine's per-packet path, where it is always inlined. (The public
    /// accessor stays a call from other crates, as the fastpath bench's floor makes it, so that
    /// this reference measures what it did.)
    #[inline(always)]
    pub(crate) fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.end]
    }

    /// Frame length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// True for an empty frame.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Grows the frame at the front by `n` bytes and returns them (contents unspecified).
    /// Uses the headroom when it suffices; otherwise shifts the frame once (slow, rare).
    #[inline]
    pub fn push_front(&mut self, n: usize) -> &mut [u8] {
        if self.start < n {
            self.grow_front(n);
        }
        self.start -= n;
        &mut self.buf[self.start..self.start + n]
    }

    /// `push_front` of a fixed size, always inlined (the fast path's VXLAN headers).
    #[inline(always)]
    pub(crate) fn push_front_array<const N: usize>(&mut self) -> Option<&mut [u8; N]> {
        if self.start < N {
            self.grow_front(N);
        }
        self.start -= N;
        self.buf.get_mut(self.start..)?.first_chunk_mut::<N>()
    }

    /// Makes room for `n` bytes in front, and the default headroom before them.
    #[cold]
    #[inline(never)]
    fn grow_front(&mut self, n: usize) {
        let grow = n - self.start + DEFAULT_HEADROOM;
        self.buf.splice(0..0, std::iter::repeat_n(0u8, grow));
        self.start += grow;
        self.end += grow;
    }

    /// Removes `n` bytes from the front (all of them if the frame is shorter).
    pub fn pull_front(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
    }

    /// Shortens the frame to `len` bytes (drops Ethernet padding after a rewrite, say).
    pub fn truncate(&mut self, len: usize) {
        self.end = self.end.min(self.start + len);
    }

    /// The frame bytes as a vector (drops the headroom).
    pub fn into_vec(mut self) -> Vec<u8> {
        self.buf.truncate(self.end);
        self.buf.drain(..self.start);
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_with_keeps_the_device_header_in_front_and_reuses_the_buffer() {
        let mut f = Frame::new(&[]);
        f.read_with(2, 16, |b: &mut [u8]| -> Result<usize, ()> {
            b[..5].copy_from_slice(&[0xaa, 0xbb, 1, 2, 3]);
            Ok(5)
        })
        .unwrap();
        assert_eq!(f.prefix(2), &[0xaa, 0xbb]);
        assert_eq!(f.bytes(), &[1, 2, 3]);
        f.push_front(1).copy_from_slice(&[9]);
        assert_eq!(f.bytes(), &[9, 1, 2, 3]);
        f.read_with(2, 16, |b: &mut [u8]| -> Result<usize, ()> {
            b[..3].copy_from_slice(&[0, 0, 7]);
            Ok(3)
        })
        .unwrap();
        assert_eq!(f.bytes(), &[7]);
        f.truncate(0);
        assert!(f.is_empty());
        assert_eq!(f.clone().into_vec(), Vec::<u8>::new());
        let err = f.read_with(2, 16, |_| Err("gone"));
        assert_eq!(err, Err("gone"));
    }

    #[test]
    fn push_and_pull_keep_the_payload() {
        let mut f = Frame::new(&[1, 2, 3]);
        f.push_front(2).copy_from_slice(&[9, 8]);
        assert_eq!(f.bytes(), &[9, 8, 1, 2, 3]);
        f.pull_front(2);
        assert_eq!(f.bytes(), &[1, 2, 3]);
        // Beyond the headroom the buffer grows instead of panicking.
        let mut g = Frame::from_vec(vec![7], 0);
        g.push_front(200).fill(0);
        assert_eq!(g.len(), 201);
        assert_eq!(g.bytes()[200], 7);
        g.pull_front(1000);
        assert!(g.is_empty());
    }
}
