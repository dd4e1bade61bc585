//! A device's offloads switched on and off as `ethtool -K DEV tso off` does. An offload is a
//! group of the kernel's named feature bits (`tso` is every `tx-tcp*-segmentation`), found by
//! name and changed together with the `SIOCETHTOOL` feature commands (`ETHTOOL_GSTRINGS`,
//! `ETHTOOL_GFEATURES`, `ETHTOOL_SFEATURES`). By name, because the groups grow: the old
//! one-feature commands (`ETHTOOL_STSO`) miss bits newer kernels add, which `ethtool -k` then
//! still shows on. Like everything here it acts in the network namespace of the calling thread.
//!
//! These are the device's own offloads (what the kernel hands it or asks of it), not the
//! virtio-net header of TAPs and packet sockets ([`crate::offload`]).

use std::os::fd::{AsRawFd, OwnedFd};

use crate::HostError;
use crate::netlink::check_link_name;
use crate::sys;

const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_SFEATURES: u32 = 0x3b;
/// The string set of feature names.
const ETH_SS_FEATURES: u32 = 4;
/// Length of one name in a string set, NUL-padded.
const ETH_GSTRING_LEN: usize = 32;
/// `struct ethtool_get_features_block`: available, requested, active, never_changed.
const GET_BLOCK_LEN: usize = 16;
/// `struct ethtool_set_features_block`: valid, requested.
const SET_BLOCK_LEN: usize = 8;
/// More feature names than any kernel has; a count above it is a misread.
const MAX_FEATURES: usize = 1024;

/// An offload of a network device, by the name `ethtool -K` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Offload {
    /// TCP segmentation offload (`tso`): the device cuts large TCP segments.
    Tso,
    /// Generic segmentation offload (`gso`): the stack hands the driver large segments and
    /// cuts them at the last moment.
    Gso,
    /// Generic receive offload (`gro`): received segments are merged before the stack.
    Gro,
    /// Transmit checksumming (`tx`): the device fills in L4 checksums. Off, TSO goes off too.
    TxChecksum,
    /// Receive checksumming (`rx`): the device checks L4 checksums.
    RxChecksum,
    /// Scatter-gather (`sg`): the device takes frames in pieces. Off, TSO and GSO go off too.
    ScatterGather,
}

impl Offload {
    /// The name `ethtool -K` uses.
    pub fn name(self) -> &'static str {
        match self {
            Offload::Tso => "tso",
            Offload::Gso => "gso",
            Offload::Gro => "gro",
            Offload::TxChecksum => "tx",
            Offload::RxChecksum => "rx",
            Offload::ScatterGather => "sg",
        }
    }

    /// The kernel feature names it covers, as ethtool's table of them (`off_flag_def`) has
    /// them: one `*` stands for any text.
    fn pattern(self) -> &'static str {
        match self {
            Offload::Tso => "tx-tcp*-segmentation",
            Offload::Gso => "tx-generic-segmentation",
            Offload::Gro => "rx-gro",
            Offload::TxChecksum => "tx-checksum-*",
            Offload::RxChecksum => "rx-checksum",
            Offload::ScatterGather => "tx-scatter-gather*",
        }
    }

    /// True when feature `name` is one of this offload's.
    fn covers(self, name: &str) -> bool {
        match self.pattern().split_once('*') {
            Some((head, tail)) => {
                name.len() >= head.len() + tail.len()
                    && name.starts_with(head)
                    && name.ends_with(tail)
            }
            None => name == self.pattern(),
        }
    }
}

/// Turns `offload` of device `link` on or off (`ethtool -K LINK NAME on|off`): every feature
/// bit of it the device lets change. Fails when the device has none it lets change, or when
/// the offload does not read as asked afterwards (it depends on another that is off).
pub fn set_offload(link: &str, offload: Offload, on: bool) -> Result<(), HostError> {
    let state = if on { "on" } else { "off" };
    let op = format!("turn {} {state} on {link}", offload.name());
    let dev = Device::open(link, &op)?;
    let features = dev.features()?;
    let bits: Vec<usize> = features
        .covered(offload)
        .filter(|&i| features.available(i))
        .collect();
    if bits.is_empty() {
        return Err(HostError::Invalid(format!(
            "{op}: the device's driver cannot change it (ethtool -k {link} shows it [fixed])"
        )));
    }
    let mut req = set_request(features.blocks.len(), &bits, on);
    dev.ioctl(&mut req)?;
    let after = dev.features()?;
    if after.any_active(offload) != on {
        return Err(HostError::Invalid(format!(
            "{op}: the kernel keeps it {}; an offload it depends on may be off \
             (see ethtool -k {link})",
            if on { "off" } else { "on" }
        )));
    }
    Ok(())
}

/// Whether `offload` of device `link` is on: any of its feature bits is, as `ethtool -k`
/// reads it.
pub fn offload(link: &str, offload: Offload) -> Result<bool, HostError> {
    let op = format!("read {} of {link}", offload.name());
    Ok(Device::open(link, &op)?.features()?.any_active(offload))
}

/// A device's feature bits: their names, and which can change and which are on.
#[derive(Debug, PartialEq, Eq)]
struct Features {
    names: Vec<String>,
    blocks: Vec<FeatureBlock>,
}

/// 32 feature bits: those the device lets change, those on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FeatureBlock {
    available: u32,
    active: u32,
}

impl Features {
    /// The bits whose names `offload` covers.
    fn covered(&self, offload: Offload) -> impl Iterator<Item = usize> + '_ {
        (0..self.names.len()).filter(move |&i| offload.covers(&self.names[i]))
    }

    fn bit(&self, i: usize, of: impl Fn(&FeatureBlock) -> u32) -> bool {
        self.blocks
            .get(i / 32)
            .is_some_and(|b| of(b) & (1 << (i % 32)) != 0)
    }

    fn available(&self, i: usize) -> bool {
        self.bit(i, |b| b.available)
    }

    fn any_active(&self, offload: Offload) -> bool {
        self.covered(offload).any(|i| self.bit(i, |b| b.active))
    }
}

/// A device named for `SIOCETHTOOL`, with a socket to send the commands on.
struct Device<'a> {
    name: &'a str,
    sock: OwnedFd,
    /// What is being done, for errors.
    op: &'a str,
}

impl<'a> Device<'a> {
    fn open(name: &'a str, op: &'a str) -> Result<Device<'a>, HostError> {
        check_link_name(name)?;
        let sock = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)
            .map_err(|e| HostError::io(format!("{op}: open a socket for ethtool"), e))?;
        Ok(Device { name, sock, op })
    }

    /// The names and states of every feature bit.
    fn features(&self) -> Result<Features, HostError> {
        let mut info = sset_info_request();
        self.ioctl(&mut info)?;
        let count = parse_sset_info(&info).ok_or_else(|| self.misread("feature count"))?;
        let mut strings = strings_request(count);
        self.ioctl(&mut strings)?;
        let names = parse_strings(&strings, count).ok_or_else(|| self.misread("feature names"))?;
        let mut get = get_request(count.div_ceil(32));
        self.ioctl(&mut get)?;
        let blocks = parse_get(&get).ok_or_else(|| self.misread("feature states"))?;
        Ok(Features { names, blocks })
    }

    fn misread(&self, what: &str) -> HostError {
        HostError::Invalid(format!(
            "{}: the kernel's answer about the {what} of {} does not have the ABI's shape",
            self.op, self.name
        ))
    }

    /// Sends the command in `buf` (which starts with its number) to the device; the kernel
    /// writes its answer over it. The ioctl's non-negative result.
    fn ioctl(&self, buf: &mut [u8]) -> Result<i32, HostError> {
        let mut req = IfReqData {
            name: [0; libc::IFNAMSIZ],
            data: buf.as_mut_ptr(),
            _pad: [0; 16],
        };
        // check_link_name bounds the name below IFNAMSIZ, so the NUL stays.
        req.name[..self.name.len()].copy_from_slice(self.name.as_bytes());
        // SAFETY: SIOCETHTOOL reads a `struct ifreq` whose data pointer points at a command;
        // `req` is a live `#[repr(C)]` ifreq at least as large as the kernel's, its pointer
        // points at `buf`, which holds the command's fixed part and as many blocks or strings
        // as the command's size fields announce (each request builder sizes it so), and stays
        // borrowed for the call; `sock` is open.
        let ret = unsafe { libc::ioctl(self.sock.as_raw_fd(), libc::SIOCETHTOOL, &mut req) };
        if ret >= 0 {
            return Ok(ret);
        }
        let e = std::io::Error::last_os_error();
        Err(match e.raw_os_error() {
            Some(libc::ENODEV) => HostError::NotFound(format!(
                "{}: there is no interface {} in this network namespace",
                self.op, self.name
            )),
            Some(libc::EOPNOTSUPP) => HostError::Invalid(format!(
                "{}: the device's driver has no ethtool feature commands",
                self.op
            )),
            _ => HostError::io(self.op.to_string(), e),
        })
    }
}

/// `struct ifreq` as `SIOCETHTOOL` reads it: the name, then a pointer to the command.
#[repr(C)]
struct IfReqData {
    name: [u8; libc::IFNAMSIZ],
    data: *mut u8,
    /// The rest of the union, so no architecture reads past the end.
    _pad: [u8; 16],
}

/// A command buffer: `words` native-endian words, then `extra` zero bytes.
fn command(words: &[u32], extra: usize) -> Vec<u8> {
    let mut b: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    b.resize(b.len() + extra, 0);
    b
}

fn word_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// `struct ethtool_sset_info` asking for the number of feature names: cmd, reserved, the u64
/// mask of sets, one u32 for the answer.
fn sset_info_request() -> Vec<u8> {
    let mut b = command(&[ETHTOOL_GSSET_INFO, 0], 12);
    b[8..16].copy_from_slice(&(1u64 << ETH_SS_FEATURES).to_ne_bytes());
    b
}

/// The number of feature names in a `ETHTOOL_GSSET_INFO` answer.
fn parse_sset_info(b: &[u8]) -> Option<usize> {
    let mask = u64::from_ne_bytes(b.get(8..16)?.try_into().ok()?);
    if mask & (1 << ETH_SS_FEATURES) == 0 {
        return None;
    }
    let count = usize::try_from(word_at(b, 16)?).ok()?;
    (count <= MAX_FEATURES).then_some(count)
}

/// `struct ethtool_gstrings` for `count` feature names: cmd, string set, length, the names.
fn strings_request(count: usize) -> Vec<u8> {
    command(
        &[ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count as u32],
        count * ETH_GSTRING_LEN,
    )
}

/// The names in a `ETHTOOL_GSTRINGS` answer, which must hold `count` of them.
fn parse_strings(b: &[u8], count: usize) -> Option<Vec<String>> {
    if usize::try_from(word_at(b, 8)?).ok()? != count {
        return None;
    }
    let names = b.get(12..12 + count * ETH_GSTRING_LEN)?;
    Some(
        names
            .chunks_exact(ETH_GSTRING_LEN)
            .map(|n| {
                let end = n.iter().position(|&c| c == 0).unwrap_or(n.len());
                String::from_utf8_lossy(&n[..end]).into_owned()
            })
            .collect(),
    )
}

/// `struct ethtool_gfeatures` with room for `blocks` blocks.
fn get_request(blocks: usize) -> Vec<u8> {
    command(&[ETHTOOL_GFEATURES, blocks as u32], blocks * GET_BLOCK_LEN)
}

/// The blocks of a `ETHTOOL_GFEATURES` answer (the kernel says how many it has; a buffer
/// with fewer holds only those).
fn parse_get(b: &[u8]) -> Option<Vec<FeatureBlock>> {
    let size = usize::try_from(word_at(b, 4)?).ok()?;
    let room = b.len().saturating_sub(8) / GET_BLOCK_LEN;
    Some(
        (0..size.min(room))
            .map(|k| {
                let at = 8 + k * GET_BLOCK_LEN;
                FeatureBlock {
                    available: word_at(b, at).unwrap_or(0),
                    active: word_at(b, at + 8).unwrap_or(0),
                }
            })
            .collect(),
    )
}

/// `struct ethtool_sfeatures` over `blocks` blocks, changing
/// `bits` to `on` and leaving every other bit alone.
fn set_request(blocks: usize, bits: &[usize], on: bool) -> Vec<u8> {
    let mut b = command(&[ETHTOOL_SFEATURES, blocks as u32], blocks * SET_BLOCK_LEN);
    for &i in bits.iter().filter(|&&i| i / 32 < blocks) {
        let at = 8 + (i / 32) * SET_BLOCK_LEN;
        let mask = 1u32 << (i % 32);
        let mut set = |offset: usize| {
            let w = word_at(&b, at + offset).unwrap_or(0) | mask;
            b[at + offset..at + offset + 4].copy_from_slice(&w.to_ne_bytes());
        };
        set(0);
        if on {
            set(4);
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feature names as a 6.x kernel lists them (a few), at their bit positions.
    fn names() -> Vec<String> {
        [
            "tx-scatter-gather",
            "tx-checksum-ipv4",
            "tx-checksum-ip-generic",
            "tx-checksum-ipv6",
            "highdma",
            "tx-scatter-gather-fraglist",
            "tx-tcp-segmentation",
            "tx-tcp-ecn-segmentation",
            "tx-tcp-mangleid-segmentation",
            "tx-tcp6-segmentation",
            "tx-generic-segmentation",
            "rx-gro",
            "tx-udp-segmentation",
            "rx-checksum",
            "tx-gre-segmentation",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn offloads_cover_the_feature_names_ethtool_groups_under_them() {
        let n = names();
        let covered = |o: Offload| -> Vec<&str> {
            n.iter()
                .filter(|x| o.covers(x))
                .map(String::as_str)
                .collect()
        };
        assert_eq!(
            covered(Offload::Tso),
            [
                "tx-tcp-segmentation",
                "tx-tcp-ecn-segmentation",
                "tx-tcp-mangleid-segmentation",
                "tx-tcp6-segmentation"
            ]
        );
        // A bit a newer kernel adds to the group is covered too.
        assert!(Offload::Tso.covers("tx-tcp-accecn-segmentation"));
        assert!(!Offload::Tso.covers("tx-udp-segmentation"));
        assert_eq!(covered(Offload::Gso), ["tx-generic-segmentation"]);
        assert_eq!(covered(Offload::Gro), ["rx-gro"]);
        assert_eq!(
            covered(Offload::TxChecksum),
            [
                "tx-checksum-ipv4",
                "tx-checksum-ip-generic",
                "tx-checksum-ipv6"
            ]
        );
        assert_eq!(covered(Offload::RxChecksum), ["rx-checksum"]);
        assert_eq!(
            covered(Offload::ScatterGather),
            ["tx-scatter-gather", "tx-scatter-gather-fraglist"]
        );
        assert_eq!(Offload::TxChecksum.name(), "tx");
    }

    #[test]
    fn requests_have_the_layout_of_linux_ethtool_h() {
        let info = sset_info_request();
        assert_eq!(info.len(), 20);
        assert_eq!(word_at(&info, 0), Some(0x37));
        assert_eq!(&info[8..16], &16u64.to_ne_bytes());
        let s = strings_request(3);
        assert_eq!(s.len(), 12 + 3 * 32);
        assert_eq!(
            (word_at(&s, 0), word_at(&s, 4), word_at(&s, 8)),
            (Some(0x1b), Some(4), Some(3))
        );
        let g = get_request(2);
        assert_eq!(g.len(), 8 + 2 * 16);
        assert_eq!((word_at(&g, 0), word_at(&g, 4)), (Some(0x3a), Some(2)));
        assert_eq!(std::mem::offset_of!(IfReqData, data), libc::IFNAMSIZ);
        assert!(std::mem::size_of::<IfReqData>() >= std::mem::size_of::<libc::ifreq>());
    }

    #[test]
    fn a_set_request_marks_only_the_bits_given_valid_and_requests_them_as_asked() {
        // Bits 6 and 33: one in each block.
        let off = set_request(2, &[6, 33], false);
        assert_eq!(off.len(), 8 + 2 * 8);
        assert_eq!((word_at(&off, 0), word_at(&off, 4)), (Some(0x3b), Some(2)));
        assert_eq!(word_at(&off, 8), Some(1 << 6), "valid, block 0");
        assert_eq!(word_at(&off, 12), Some(0), "requested off");
        assert_eq!(word_at(&off, 16), Some(1 << 1), "valid, block 1");
        assert_eq!(word_at(&off, 20), Some(0));
        let on = set_request(2, &[6, 7], true);
        assert_eq!(word_at(&on, 8), Some(0b1100_0000));
        assert_eq!(word_at(&on, 12), Some(0b1100_0000));
        // A bit beyond the blocks is dropped, not written past the end.
        assert_eq!(set_request(1, &[40], true).len(), 16);
    }

    #[test]
    fn answers_are_read_and_misshapen_ones_refused() {
        let mut info = sset_info_request();
        info[16..20].copy_from_slice(&15u32.to_ne_bytes());
        assert_eq!(parse_sset_info(&info), Some(15));
        info[8..16].copy_from_slice(&0u64.to_ne_bytes());
        assert_eq!(parse_sset_info(&info), None, "the set is not supported");

        let n = names();
        let mut s = strings_request(n.len());
        for (k, name) in n.iter().enumerate() {
            let at = 12 + k * 32;
            s[at..at + name.len()].copy_from_slice(name.as_bytes());
        }
        assert_eq!(parse_strings(&s, n.len()), Some(n.clone()));
        assert_eq!(parse_strings(&s, n.len() + 1), None);
        assert_eq!(parse_strings(&s[..40], n.len()), None);

        let mut g = get_request(1);
        g[8..12].copy_from_slice(&0b0100_0000u32.to_ne_bytes()); // available: bit 6
        g[16..20].copy_from_slice(&0b1100_0000u32.to_ne_bytes()); // active: bits 6, 7
        let blocks = parse_get(&g).expect("blocks");
        let f = Features { names: n, blocks };
        assert!(f.available(6) && !f.available(7) && !f.available(400));
        assert!(f.any_active(Offload::Tso));
        assert!(!f.any_active(Offload::Gso));
        assert_eq!(parse_get(&[1, 2, 3]), None);
    }

    #[test]
    fn a_bad_name_is_refused_before_any_ioctl() {
        let e = set_offload("a/b", Offload::Tso, false).expect_err("bad name");
        assert!(matches!(e, HostError::Invalid(_)), "{e}");
    }
}
