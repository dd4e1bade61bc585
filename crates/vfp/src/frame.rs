//! A frame buffer with headroom, so that VXLAN encapsulation can prepend its outer headers
//! without moving the packet or allocating.

/// Headroom reserved in front of a frame: enough for an Ethernet + IPv6 + UDP + VXLAN outer
/// header (70 bytes) with room to spare.
pub const DEFAULT_HEADROOM: usize = 128;

/// An Ethernet frame being processed: the bytes live in `buf[start..]`; the bytes before
/// `start` are headroom for encapsulation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    buf: Vec<u8>,
    start: usize,
}

impl Frame {
    /// Copies `bytes` into a new buffer with the default headroom.
    pub fn new(bytes: &[u8]) -> Frame {
        let mut buf = Vec::with_capacity(DEFAULT_HEADROOM + bytes.len());
        buf.resize(DEFAULT_HEADROOM, 0);
        buf.extend_from_slice(bytes);
        Frame {
            buf,
            start: DEFAULT_HEADROOM,
        }
    }

    /// Wraps a buffer whose first `headroom` bytes are free space and whose rest is the frame.
    /// A `headroom` larger than the buffer is clamped to an empty frame.
    pub fn from_vec(buf: Vec<u8>, headroom: usize) -> Frame {
        let start = headroom.min(buf.len());
        Frame { buf, start }
    }

    /// Replaces the frame's contents, keeping the default headroom and reusing the allocation.
    pub fn set(&mut self, bytes: &[u8]) {
        self.buf.truncate(DEFAULT_HEADROOM.min(self.buf.len()));
        self.buf.resize(DEFAULT_HEADROOM, 0);
        self.buf.extend_from_slice(bytes);
        self.start = DEFAULT_HEADROOM;
    }

    /// The frame bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The frame bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..]
    }

    /// Frame length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    /// True for an empty frame.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Grows the frame at the front by `n` bytes and returns them (contents unspecified).
    /// Uses the headroom when it suffices; otherwise shifts the frame once (slow, rare).
    pub fn push_front(&mut self, n: usize) -> &mut [u8] {
        if self.start < n {
            let grow = n - self.start + DEFAULT_HEADROOM;
            self.buf.splice(0..0, std::iter::repeat_n(0u8, grow));
            self.start += grow;
        }
        self.start -= n;
        &mut self.buf[self.start..self.start + n]
    }

    /// Removes `n` bytes from the front (all of them if the frame is shorter).
    pub fn pull_front(&mut self, n: usize) {
        self.start = (self.start + n).min(self.buf.len());
    }

    /// Shortens the frame to `len` bytes (drops Ethernet padding after a rewrite, say).
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(self.start + len);
    }

    /// The frame bytes as a vector (drops the headroom).
    pub fn into_vec(mut self) -> Vec<u8> {
        self.buf.drain(..self.start);
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
