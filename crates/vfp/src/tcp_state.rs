//! Just enough TCP connection tracking to pick an idle timeout (a half-open connection or a
//! closed one should not hold a flow entry as long as an established one), and to tell whether
//! the far end of a closed connection would take a new connection on the same addresses and
//! ports while it waits in TIME-WAIT (so that NAT can hand the same tuple out again).

use crate::wire::TcpFlags;
use std::time::Duration;

/// Which way a packet travels relative to the connection's first packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowSide {
    /// Same direction as the packet that created the connection.
    Forward,
    /// The replies.
    Reverse,
}

/// Where a TCP connection is in its life, as far as timeouts care.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpPhase {
    /// Handshake not yet answered.
    Opening,
    /// Both sides have exchanged acknowledged segments.
    Established,
    /// A FIN has been seen.
    Closing,
    /// Reset, or both sides sent FIN.
    Closed,
}

const SYN_FWD: u8 = 1;
const SEEN_REV: u8 = 2;
const ACK_REV: u8 = 4;
const FIN_FWD: u8 = 8;
const FIN_REV: u8 = 16;
const RST: u8 = 32;
/// The reverse side sent its FIN first: it closed actively and waits in TIME-WAIT.
const REV_CLOSED_FIRST: u8 = 64;
/// The forward side's FIN has been recorded (`fin`).
const FIN_MARKED: u8 = 128;

/// Where a TCP segment stands in its sender's sequence space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpMark {
    /// Its sequence number.
    pub seq: u32,
    /// The sequence number after it (a SYN and a FIN count one).
    pub end: u32,
    /// Its timestamp (RFC 7323 TSval), if it carries one.
    pub tsval: Option<u32>,
}

/// The TCP flags seen on a connection, and the forward side's FIN.
///
/// Ten bytes with byte alignment (the words kept as bytes), so that it fills the end of the
/// flow record's first cache line without padding (`FlowRecord`'s layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct TcpTracker {
    bits: u8,
    /// The sequence number after the forward FIN: the reverse side's `rcv_nxt` in TIME-WAIT.
    fin_end: [u8; 4],
    /// The forward FIN's timestamp, 0 when it carried none: the reverse side's `ts_recent`.
    fin_tsval: [u8; 4],
    fin_has_ts: bool,
}

impl TcpTracker {
    /// Records a segment's flags.
    #[inline(always)]
    pub fn observe(&mut self, side: FlowSide, flags: u8) {
        let f = TcpFlags(flags);
        let mut bits = 0;
        if side == FlowSide::Forward
            && f.has(TcpFlags::FIN)
            && self.bits & (FIN_REV | FIN_FWD) == FIN_REV
        {
            bits |= REV_CLOSED_FIRST;
        }
        if f.has(TcpFlags::RST) {
            bits |= RST;
        }
        match side {
            FlowSide::Forward => {
                if f.has(TcpFlags::SYN) {
                    bits |= SYN_FWD;
                }
                if f.has(TcpFlags::FIN) {
                    bits |= FIN_FWD;
                }
            }
            FlowSide::Reverse => {
                bits |= SEEN_REV;
                if f.has(TcpFlags::ACK) {
                    bits |= ACK_REV;
                }
                if f.has(TcpFlags::FIN) {
                    bits |= FIN_REV;
                }
            }
        }
        self.bits |= bits;
    }

    /// Records the forward side's FIN segment (for `takes_new_syn`).
    pub fn forward_fin(&mut self, m: TcpMark) {
        self.bits |= FIN_MARKED;
        self.fin_end = m.end.to_ne_bytes();
        self.fin_tsval = m.tsval.unwrap_or(0).to_ne_bytes();
        self.fin_has_ts = m.tsval.is_some();
    }

    /// True if the connection has closed and its reverse side would take `syn` (a new
    /// connection's SYN from the forward side's addresses and ports) as a new connection. A
    /// side that closed first waits in TIME-WAIT and answers an old-looking SYN as a stray
    /// segment of the old connection; Linux (`tcp_timewait_state_process`, after RFC 1122
    /// 4.2.2.13 and RFC 7323) takes it if its timestamp is newer than the last one (when both
    /// carry one), else if its sequence number is past the old FIN. A reset leaves nothing
    /// waiting. Without the old FIN or the SYN nothing can be told: false.
    pub fn takes_new_syn(&self, syn: Option<TcpMark>) -> bool {
        if self.phase() != TcpPhase::Closed {
            return false;
        }
        if self.bits & RST != 0 || self.bits & REV_CLOSED_FIRST == 0 {
            return true;
        }
        let Some(syn) = syn.filter(|_| self.bits & FIN_MARKED != 0) else {
            return false;
        };
        match syn.tsval {
            Some(ts) if self.fin_has_ts => {
                (ts.wrapping_sub(u32::from_ne_bytes(self.fin_tsval)) as i32) > 0
            }
            _ => (syn.seq.wrapping_sub(u32::from_ne_bytes(self.fin_end)) as i32) > 0,
        }
    }

    /// The phase the flags add up to.
    pub fn phase(self) -> TcpPhase {
        let has = |b| self.bits & b != 0;
        if has(RST) || (has(FIN_FWD) && has(FIN_REV)) {
            TcpPhase::Closed
        } else if has(FIN_FWD) || has(FIN_REV) {
            TcpPhase::Closing
        } else if has(ACK_REV) {
            TcpPhase::Established
        } else {
            TcpPhase::Opening
        }
    }
}

/// Idle timeouts after which a connection's flow entry is removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowTimeouts {
    /// TCP before the handshake is answered.
    pub tcp_opening: Duration,
    /// Established TCP.
    pub tcp_established: Duration,
    /// TCP after a FIN.
    pub tcp_closing: Duration,
    /// TCP after RST or FIN both ways (covers the last ACK and retransmits).
    pub tcp_closed: Duration,
    /// UDP.
    pub udp: Duration,
    /// ICMP and anything else.
    pub other: Duration,
}

impl Default for FlowTimeouts {
    /// Established TCP idles out after 4 minutes, the idle timeout Azure's VFP-based load
    /// balancer documents; the rest are chosen shorter so half-open and closed connections
    /// (e.g. a SYN flood) give their entries back quickly.
    fn default() -> Self {
        FlowTimeouts {
            tcp_opening: Duration::from_secs(30),
            tcp_established: Duration::from_secs(240),
            tcp_closing: Duration::from_secs(30),
            tcp_closed: Duration::from_secs(5),
            udp: Duration::from_secs(120),
            other: Duration::from_secs(60),
        }
    }
}

impl FlowTimeouts {
    /// The timeout for a TCP connection in `phase`.
    pub fn tcp(&self, phase: TcpPhase) -> Duration {
        match phase {
            TcpPhase::Opening => self.tcp_opening,
            TcpPhase::Established => self.tcp_established,
            TcpPhase::Closing => self.tcp_closing,
            TcpPhase::Closed => self.tcp_closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_and_close_walk_the_phases() {
        let mut t = TcpTracker::default();
        t.observe(FlowSide::Forward, TcpFlags::SYN);
        assert_eq!(t.phase(), TcpPhase::Opening);
        t.observe(FlowSide::Reverse, TcpFlags::SYN | TcpFlags::ACK);
        assert_eq!(t.phase(), TcpPhase::Established);
        t.observe(FlowSide::Forward, TcpFlags::FIN | TcpFlags::ACK);
        assert_eq!(t.phase(), TcpPhase::Closing);
        t.observe(FlowSide::Reverse, TcpFlags::FIN | TcpFlags::ACK);
        assert_eq!(t.phase(), TcpPhase::Closed);
        let mut r = TcpTracker::default();
        r.observe(FlowSide::Reverse, TcpFlags::RST);
        assert_eq!(r.phase(), TcpPhase::Closed);
        assert!(FlowTimeouts::default().tcp(TcpPhase::Closed) < Duration::from_secs(10));
    }

    #[test]
    fn a_side_that_closed_first_takes_only_a_newer_syn() {
        let syn = |seq: u32, tsval: Option<u32>| {
            Some(TcpMark {
                seq,
                end: seq.wrapping_add(1),
                tsval,
            })
        };
        let fin = |seq: u32, tsval: Option<u32>| TcpMark {
            seq,
            end: seq.wrapping_add(1),
            tsval,
        };
        // The reverse side (a server answering and closing) closes first.
        let mut t = TcpTracker::default();
        t.observe(FlowSide::Forward, TcpFlags::SYN);
        t.observe(FlowSide::Reverse, TcpFlags::SYN | TcpFlags::ACK);
        t.observe(FlowSide::Reverse, TcpFlags::FIN | TcpFlags::ACK);
        assert!(!t.takes_new_syn(syn(5, None)), "not closed yet");
        t.observe(FlowSide::Forward, TcpFlags::FIN | TcpFlags::ACK);
        assert!(!t.takes_new_syn(syn(5, None)), "the FIN was not recorded");
        t.forward_fin(fin(1000, Some(7000)));
        assert!(t.takes_new_syn(syn(5, Some(7001))), "newer timestamp");
        assert!(!t.takes_new_syn(syn(5000, Some(6000))), "older timestamp");
        assert!(!t.takes_new_syn(syn(5000, Some(7000))), "same timestamp");
        // Without timestamps on both, the sequence number decides (modulo 2^32).
        assert!(t.takes_new_syn(syn(1002, None)));
        assert!(!t.takes_new_syn(syn(1001, None)));
        assert!(!t.takes_new_syn(syn(5, None)));
        t.forward_fin(fin(u32::MAX - 1, None));
        assert!(t.takes_new_syn(syn(3, Some(1))));
        assert!(!t.takes_new_syn(None));
        // A reset kills TIME-WAIT.
        t.observe(FlowSide::Forward, TcpFlags::RST);
        assert!(t.takes_new_syn(None));
        // The forward side closing first leaves the reverse side nothing to wait for.
        let mut c = TcpTracker::default();
        c.observe(FlowSide::Forward, TcpFlags::FIN | TcpFlags::ACK);
        c.observe(FlowSide::Reverse, TcpFlags::FIN | TcpFlags::ACK);
        assert!(c.takes_new_syn(None));
    }
}
