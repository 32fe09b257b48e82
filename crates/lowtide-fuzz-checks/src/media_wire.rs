//! The media and ladder headers: lowtide-media's layered-video header (`wire`), the bit-rate
//! ladder's messages on plain TCP (`ladder::wire`: the manifest, media frames, switch
//! requests) and the lab ladder flow's report datagram (`ladder_flow::wire`, UDP to the
//! server), fed to both server policies.
//!
//! Input: byte 0 is a read size; the rest is everything at once. Must hold:
//! - a media header that decodes re-encodes to the bytes it was read from;
//! - the ladder client's parser gives the same result (error or bytes per rung) whether the
//!   bytes come at once or in reads of any size; a manifest it accepts re-encodes to the
//!   bytes it was read from; it counts no more media bytes than it was given, and only to
//!   rungs of the ladder;
//! - a switch request decodes to a rung of the ladder and re-encodes to itself;
//! - a report that decodes re-encodes to itself, has no more frames received than expected,
//!   and the report rule and DBAT's rule keep streaming a rung of their ladder whatever it
//!   says, with its loss within [0, 1].

use std::time::{Duration, Instant};

use lowtide_lab::ladder_flow::wire::{decode_report, encode_report, REPORT_LEN};
use lowtide_media::ladder::dbat_rule::{DbatRule, DbatRuleConfig};
use lowtide_media::ladder::report_rule::{ReportRule, ReportRuleConfig};
use lowtide_media::ladder::server_policy::{hasan_ladder, ServerPolicy, ServerSignal};
use lowtide_media::ladder::wire::{
    decode_switch, manifest, switch_request, LadderWireError, MediaParser, MEDIA_HEADER,
};
use lowtide_media::wire::{MediaHeader, DATA_HEADER};

pub fn check(data: &[u8]) {
    let Some((&read, rest)) = data.split_first() else {
        return;
    };
    media_header(rest);
    ladder(rest, usize::from(read).max(1));
    // Switch requests, checked against the ladder the bytes announce (or the paper's).
    let l = parse_whole(rest)
        .0
        .ladder()
        .cloned()
        .unwrap_or_else(hasan_ladder);
    for m in rest.chunks_exact(2) {
        let m = [m[0], m[1]];
        if let Ok(rung) = decode_switch(m, &l) {
            assert!(rung < l.len());
            assert_eq!(switch_request(rung), m);
        }
    }
    report(rest);
}

fn media_header(bytes: &[u8]) {
    match MediaHeader::decode(bytes) {
        Ok(MediaHeader::Data {
            window,
            frame,
            layer,
        }) => {
            let m = MediaHeader::data_message(window, frame, layer, bytes.len());
            assert_eq!(&m[..DATA_HEADER], &bytes[..DATA_HEADER]);
        }
        Ok(MediaHeader::WindowEnd { window, sent }) => {
            let m = MediaHeader::window_end_message(window, sent);
            assert_eq!(&bytes[..m.len()], &m[..]);
        }
        Err(_) => {}
    }
}

fn parse_whole(bytes: &[u8]) -> (MediaParser, Result<(), LadderWireError>) {
    let mut p = MediaParser::default();
    let r = p.feed(bytes);
    (p, r)
}

fn ladder(bytes: &[u8], read: usize) {
    let (whole, want) = parse_whole(bytes);
    let mut chunked = MediaParser::default();
    let mut got = Ok(());
    for c in bytes.chunks(read) {
        got = chunked.feed(c);
        if got.is_err() {
            break;
        }
    }
    assert_eq!(got, want);
    assert_eq!(chunked.bytes_by_rung(), whole.bytes_by_rung());
    assert_eq!(chunked.last_rung(), whole.last_rung());
    let Some(l) = whole.ladder() else {
        assert!(whole.bytes_by_rung().is_empty());
        return;
    };
    let m = manifest(l);
    assert_eq!(&bytes[..m.len()], &m[..], "the manifest read back");
    let counted: u64 = whole.bytes_by_rung().iter().sum();
    // Every media byte came behind a header of its own.
    assert!(counted <= (bytes.len() - m.len()).saturating_sub(MEDIA_HEADER) as u64);
    assert_eq!(whole.bytes_by_rung().len(), l.len());
    assert!(whole.last_rung().is_none_or(|r| r < l.len()));
}

fn report(bytes: &[u8]) {
    let now = Instant::now();
    let ladder = hasan_ladder();
    let mut report_rule = ReportRule::new(ladder.clone(), 0, ReportRuleConfig::default(), now)
        .expect("the default rule");
    let mut dbat_rule =
        DbatRule::new(ladder.clone(), 0, DbatRuleConfig::default(), now).expect("the default rule");
    // Each report datagram: the input cut into report-sized pieces, as well as the whole.
    let datagrams = std::iter::once(bytes).chain(bytes.chunks(REPORT_LEN));
    for (i, d) in datagrams.enumerate() {
        let Some(r) = decode_report(d) else {
            continue;
        };
        assert_eq!(&encode_report(&r)[..], d);
        assert!(r.frames_received <= r.frames_expected);
        assert!(r.loss().is_none_or(|l| (0.0..=1.0).contains(&l)));
        assert!(r.bps().is_none_or(|b| b.is_finite() && b >= 0.0));
        let at = now + Duration::from_millis(500 * i as u64);
        let policies: [&mut dyn ServerPolicy; 2] = [&mut report_rule, &mut dbat_rule];
        for p in policies {
            if let Some(s) = p.on_signal(at, &ServerSignal::Report(r)) {
                assert!(s.to < ladder.len(), "{s:?}");
            }
            assert!(p.rung() < ladder.len());
        }
    }
}
