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
