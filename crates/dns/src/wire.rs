//! A response on the wire, cut to fit as CoreDNS cuts it (miekg/dns `Msg.Truncate`): records
//! are written in order (answers, authority, additional) while they fit, the first that does
//! not and everything after it are left out and TC is set; the OPT record always has room. So
//! an answer is a valid message of at most the transport's size, never a record cut in half,
//! and its cost is what fits, not what the name has.

use hickory_proto::ProtoError;
use hickory_proto::op::{Edns, Header, HeaderCounts, Metadata, Query};
use hickory_proto::rr::Record;
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder};

/// The three record sections of a response, in order.
pub type Sections<'a> = [&'a [Record]; 3];

/// Encodes a response with `metadata`, the question `query` (echoed), `sections` and `edns`
/// (OPT, carrying the high bits of the rcode) in at most `limit` bytes (512 at least).
/// Records whose owner is the question's name are written with the question's spelling (the
/// answer cached for a name is shared by every spelling of it). `None` only if the encoder
/// fails on a record it cannot write at all.
pub fn encode(
    mut metadata: Metadata,
    query: Option<&Query>,
    sections: Sections<'_>,
    edns: Option<&Edns>,
    limit: usize,
) -> Option<Vec<u8>> {
    let opt = edns.map(|e| {
        let mut e = e.clone();
        e.set_rcode_high(metadata.response_code.high());
        e
    });
    let opt_len = opt.as_ref().map_or(0, opt_size);
    let limit = limit.clamp(512, usize::from(u16::MAX));
    // What the records may take; the OPT record is written after them, into what is left.
    let budget = limit - opt_len;
    let mut buf = Vec::with_capacity(limit.min(4096));
    let mut enc = BinEncoder::new(&mut buf);
    let place = enc.place::<Header>().ok()?;
    let mut counts = [0u16; 4];
    if let Some(q) = query {
        q.emit(&mut enc).ok()?;
        counts[0] = 1;
    }
    let mut cut = false;
    'sections: for (section, records) in sections.iter().enumerate() {
        for record in *records {
            let respelled = query.and_then(|q| respell(record, q));
            let before = enc.offset();
            // Measured after compression, as written (a name is compressed once written).
            let fits = match respelled.as_ref().unwrap_or(record).emit(&mut enc) {
                Ok(()) => enc.offset() <= budget,
                Err(ProtoError::MaxBufferSizeExceeded(_)) => false,
                Err(_) => return None,
            };
            if !fits {
                // Nothing is written after this but the OPT record (the root name, never a
                // pointer), so the cut record's name pointers are never used.
                enc.set_offset(before);
                cut = true;
                break 'sections;
            }
            counts[section + 1] += 1;
        }
    }
    if let Some(opt) = &opt {
        opt.emit(&mut enc).ok()?;
        counts[3] += 1;
    }
    metadata.truncation |= cut;
    let end = enc.offset();
    let [queries, answers, authorities, additionals] = counts;
    let counts = HeaderCounts {
        queries,
        answers,
        authorities,
        additionals,
    };
    place.replace(&mut enc, Header { metadata, counts }).ok()?;
    // A record that did not fit was rolled back in the offset, not in the buffer.
    buf.truncate(end);
    Some(buf)
}

/// `record` owned by the question's name in the question's spelling, when it is owned by the
/// same name spelled otherwise.
fn respell(record: &Record, query: &Query) -> Option<Record> {
    let (owner, asked) = (&record.name, query.name());
    if owner == asked && !owner.eq_case(asked) {
        let mut r = record.clone();
        r.name = asked.clone();
        Some(r)
    } else {
        None
    }
}

/// The OPT record's size: root name, type, class, TTL, RDLENGTH and the options.
fn opt_size(edns: &Edns) -> usize {
    let mut buf = Vec::new();
    let mut enc = BinEncoder::new(&mut buf);
    match edns.emit(&mut enc) {
        Ok(()) => buf.len(),
        Err(_) => 11,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
    use hickory_proto::rr::rdata::A;
    use hickory_proto::rr::{Name, RData, RecordType};

    fn records(name: &str, n: usize) -> Vec<Record> {
        let name = Name::from_ascii(name).unwrap();
        (0..n)
            .map(|i| {
                let ip = std::net::Ipv4Addr::from(0x0af4_0000 + i as u32);
                Record::from_rdata(name.clone(), 30, RData::A(A(ip)))
            })
            .collect()
    }

    fn metadata() -> Metadata {
        Message::response(7, OpCode::Query).metadata
    }

    #[test]
    fn a_big_answer_is_cut_at_a_record_boundary_with_tc_and_opt_kept() {
        let name = "big.default.svc.cluster.local.";
        let query = Query::query(Name::from_ascii(name).unwrap(), RecordType::A);
        let answers = records(name, 5000);
        let mut edns = Edns::new();
        edns.set_max_payload(1232);
        for limit in [512, 1232, 65535] {
            let bytes = encode(
                metadata(),
                Some(&query),
                [&answers, &[], &[]],
                Some(&edns),
                limit,
            )
            .expect("encoded");
            assert!(bytes.len() <= limit, "{} > {limit}", bytes.len());
            let m = Message::from_vec(&bytes).expect("a whole message");
            assert!(m.metadata.truncation);
            assert_eq!(m.metadata.message_type, MessageType::Response);
            assert!(!m.answers.is_empty() && m.answers.len() < 5000);
            assert_eq!(m.edns.map(|e| e.max_payload()), Some(1232));
            // As many as fit: one more would not.
            let k = m.answers.len();
            let more = &answers[..=k];
            let again = encode(
                metadata(),
                Some(&query),
                [more, &[], &[]],
                Some(&edns),
                limit,
            )
            .expect("encoded");
            let again = Message::from_vec(&again).unwrap();
            assert!(
                again.metadata.truncation && again.answers.len() == k,
                "{limit}: {k}"
            );
        }
        // What fits is not cut and has no TC.
        let few = records(name, 10);
        let bytes = encode(metadata(), Some(&query), [&few, &[], &[]], None, 512).unwrap();
        let m = Message::from_vec(&bytes).unwrap();
        assert!(!m.metadata.truncation && m.answers.len() == 10);
    }

    #[test]
    fn the_rcode_high_bits_go_in_the_opt_record() {
        let mut meta = metadata();
        meta.response_code = ResponseCode::BADVERS;
        let bytes = encode(meta, None, [&[], &[], &[]], Some(&Edns::new()), 512).unwrap();
        let m = Message::from_vec(&bytes).unwrap();
        // BADVERS and BADSIG share code 16.
        assert_eq!(u16::from(m.metadata.response_code), 16);
        assert_eq!(m.edns.map(|e| e.version()), Some(0));
    }

    #[test]
    fn owners_take_the_questions_spelling() {
        let asked = Name::from_ascii("Web.Default.svc.cluster.local.").unwrap();
        let query = Query::query(asked.clone(), RecordType::A);
        let answers = records("web.default.svc.cluster.local.", 1);
        let bytes = encode(metadata(), Some(&query), [&answers, &[], &[]], None, 512).unwrap();
        let m = Message::from_vec(&bytes).unwrap();
        assert!(m.answers[0].name.eq_case(&asked), "{}", m.answers[0].name);
    }
}
