//! The physical network: one L2 segment with MAC learning, as a plain switch does it. Frames
//! go to the attachment that last sent from their destination MAC; broadcasts and unknown
//! destinations go to every other attachment. Every frame it carries is captured, so a test
//! can read exactly what was on the wire.

use std::collections::HashMap;

use vfp::wire::{EthernetFrame, MacAddr};

/// Identifies an attachment (a node's NIC, the external host).
pub type AttachmentId = usize;

/// A frame seen on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireFrame {
    /// Who sent it.
    pub from: AttachmentId,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// An L2 segment with MAC learning.
#[derive(Clone, Debug, Default)]
pub struct Fabric {
    names: Vec<String>,
    learned: HashMap<MacAddr, AttachmentId>,
    /// Every frame carried, in order.
    pub captured: Vec<WireFrame>,
}

impl Fabric {
    /// Attaches something to the segment.
    pub fn attach(&mut self, name: &str) -> AttachmentId {
        self.names.push(name.to_string());
        self.names.len() - 1
    }

    /// The name of an attachment.
    pub fn name(&self, id: AttachmentId) -> &str {
        self.names.get(id).map_or("?", String::as_str)
    }

    /// Carries a frame sent by `from`: learns its source, returns where it goes.
    pub fn carry(&mut self, from: AttachmentId, frame: &[u8]) -> Vec<AttachmentId> {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return Vec::new();
        };
        self.captured.push(WireFrame {
            from,
            bytes: frame.to_vec(),
        });
        let src = eth.src();
        if !src.is_group() {
            self.learned.insert(src, from);
        }
        let dst = eth.dst();
        match self.learned.get(&dst) {
            Some(&to) if !dst.is_group() => {
                if to == from {
                    Vec::new()
                } else {
                    vec![to]
                }
            }
            _ => (0..self.names.len()).filter(|&a| a != from).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(src: u8, dst: [u8; 6]) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[0..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src]);
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        f
    }

    #[test]
    fn floods_until_it_learns_then_forwards_to_one() {
        let mut fab = Fabric::default();
        let (a, b, c) = (fab.attach("a"), fab.attach("b"), fab.attach("c"));
        assert_eq!(fab.carry(a, &frame(1, [2, 0, 0, 0, 0, 2])), vec![b, c]);
        assert_eq!(fab.carry(b, &frame(2, [2, 0, 0, 0, 0, 1])), vec![a]);
        assert_eq!(fab.carry(a, &frame(1, [2, 0, 0, 0, 0, 2])), vec![b]);
        assert_eq!(fab.carry(c, &frame(3, [0xff; 6])), vec![a, b]);
        assert_eq!(fab.captured.len(), 4);
    }
}
