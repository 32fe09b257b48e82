//! Properties of the encoded-video model on generated input: the Annex-B splitter's units do
//! not depend on how the stream is chunked; no parser panics or exceeds its memory limit on
//! arbitrary bytes; the receiver's gate never hands on a unit whose reference it did not hand
//! on since the keyframe before it, and drops nothing when nothing is lost.

use std::time::{Duration, Instant};

use lowtide_media::encoded::{
    AnnexBReader, AnnexBSplitter, Codec, DropReason, FrameKind, H264Framer, H265Framer, IvfFramer,
    IvfHeader, ReceiverGate, SenderTracker, UnitInfo, Verdict,
};
use proptest::prelude::*;

/// NAL units (no `00 00 0x` with x ≤ 3 inside: zeros come singly) joined with 3- or 4-byte
/// start codes, and the units.
fn annexb_stream() -> impl Strategy<Value = (Vec<u8>, Vec<Vec<u8>>)> {
    let nal = prop::collection::vec(prop_oneof![3 => 1u8..=255, 1 => Just(0u8)], 1..40).prop_map(
        |mut v| {
            // No two zeros in a row, and a NAL does not end with a zero (trailing zeros are
            // taken as part of the next start code).
            v.dedup_by(|a, b| *a == 0 && *b == 0);
            if v.last() == Some(&0) {
                v.pop();
            }
            if v.is_empty() {
                v.push(0x41);
            }
            v
        },
    );
    prop::collection::vec((nal, any::<bool>()), 1..20).prop_map(|nals| {
        let mut bytes = Vec::new();
        for (n, four) in &nals {
            if *four {
                bytes.push(0);
            }
            bytes.extend_from_slice(&[0, 0, 1]);
            bytes.extend_from_slice(n);
        }
        (bytes, nals.into_iter().map(|(n, _)| n).collect())
    })
}

fn split_in(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut s = AnnexBSplitter::new(1 << 16);
    let mut out = Vec::new();
    let mut at = 0;
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    cuts.sort_unstable();
    for c in cuts.into_iter().chain([data.len()]) {
        out.extend(s.push(&data[at..c]).unwrap());
        at = c;
    }
    out.extend(s.finish().unwrap());
    out
}

fn kind() -> impl Strategy<Value = FrameKind> {
    prop_oneof![
        1 => Just(FrameKind::Keyframe),
        5 => Just(FrameKind::Reference),
        3 => Just(FrameKind::NonReference),
        1 => Just(FrameKind::ParameterSets),
    ]
}

proptest! {
    #[test]
    fn splitting_does_not_depend_on_chunking(
        (data, nals) in annexb_stream(),
        cuts in prop::collection::vec(any::<usize>(), 0..30),
    ) {
        prop_assert_eq!(split_in(&data, &[]), nals.clone());
        prop_assert_eq!(split_in(&data, &cuts), nals);
    }

    #[test]
    fn access_units_do_not_depend_on_chunking(
        nals in prop::collection::vec((prop::sample::select(vec![0x09u8, 0x67, 0x68, 0x06, 0x65, 0x41, 0x01]), prop::sample::select(vec![0x80u8, 0x40, 0x9a])), 1..40),
        cuts in prop::collection::vec(any::<usize>(), 0..20),
    ) {
        let mut data = Vec::new();
        for (h, b) in &nals {
            data.extend_from_slice(&[0, 0, 0, 1, *h, *b]);
        }
        let now = Instant::now();
        let read = |cuts: &[usize]| {
            let mut r = AnnexBReader::new(H264Framer::new(1 << 16), 1 << 16);
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
            cuts.sort_unstable();
            let (mut out, mut at) = (Vec::new(), 0);
            for c in cuts.into_iter().chain([data.len()]) {
                out.extend(r.push(&data[at..c], now).unwrap());
                at = c;
            }
            out.extend(r.finish().unwrap());
            out
        };
        prop_assert_eq!(read(&cuts), read(&[]));
    }

    #[test]
    fn parsers_never_panic_and_stay_bounded(
        data in prop::collection::vec(any::<u8>(), 0..2000),
        chunk in 1usize..300,
        codec in prop::sample::select(vec![Codec::Vp8, Codec::Vp9, Codec::Av1]),
    ) {
        let now = Instant::now();
        let mut s = AnnexBSplitter::new(64);
        for c in data.chunks(chunk) {
            if s.push(c).is_err() { break; }
            prop_assert!(s.buffered() <= 64);
        }
        let _ = s.finish();
        let mut h264 = AnnexBReader::new(H264Framer::new(256), 64);
        let mut h265 = AnnexBReader::new(H265Framer::new(256), 64);
        for c in data.chunks(chunk) {
            let _ = h264.push(c, now);
            let _ = h265.push(c, now);
        }
        let _ = h264.finish();
        let _ = h265.finish();
        // IVF: raw bytes, and arbitrary frames behind a valid header (to reach the codecs).
        let header = IvfHeader { codec, width: 64, height: 64, timebase_rate: 25, timebase_scale: 1, frame_count: 0 };
        for input in [data.clone(), [header.to_bytes().to_vec(), data.clone()].concat()] {
            let mut ivf = IvfFramer::new(512);
            for c in input.chunks(chunk) {
                if ivf.push(c, now).is_err() { break; }
            }
            let _ = ivf.finish();
        }
    }

    #[test]
    fn gate_never_outputs_a_unit_with_a_missing_reference(
        stream in prop::collection::vec((kind(), 0u8..3, any::<bool>(), any::<bool>()), 1..120),
    ) {
        let now = Instant::now();
        let units: Vec<UnitInfo> = stream.iter().enumerate()
            .map(|(i, &(k, t, _, _))| UnitInfo::new(i as u64, k).layer(t)).collect();
        let mut gate = ReceiverGate::new(Duration::from_millis(50));
        let mut output = vec![false; units.len()];
        for (u, &(_, _, lost, told)) in units.iter().zip(&stream) {
            if lost && u.kind != FrameKind::ParameterSets {
                if told { gate.missing(now, u.index, Some(*u)); }
            } else {
                output[u.index as usize] = gate.receive(now, *u) == Verdict::Decode;
            }
        }
        // The oracle: a picture decodes only if the keyframe before it and every reference
        // between them in its layer or below were output.
        for (i, u) in units.iter().enumerate() {
            if !output[i] || matches!(u.kind, FrameKind::Keyframe | FrameKind::ParameterSets) {
                continue;
            }
            let key = (0..i).rev().find(|&j| units[j].kind == FrameKind::Keyframe);
            prop_assert!(key.is_some(), "unit {} output before any keyframe", i);
            let key = key.unwrap();
            prop_assert!(output[key], "unit {} output after a lost keyframe", i);
            for j in key + 1..i {
                if units[j].kind == FrameKind::Reference && units[j].temporal_id <= u.temporal_id {
                    prop_assert!(output[j], "unit {} output without its reference {}", i, j);
                }
            }
        }
        // Nothing lost after the first keyframe: everything after it is output.
        if stream.iter().all(|s| !s.2) {
            if let Some(k) = units.iter().position(|u| u.kind == FrameKind::Keyframe) {
                prop_assert!(output[k..].iter().all(|&o| o));
            }
        }
    }

    #[test]
    fn the_gate_drops_nothing_the_tracker_did_not(
        stream in prop::collection::vec((kind(), 0u8..3, prop::bool::weighted(0.15)), 1..120),
    ) {
        let now = Instant::now();
        let units: Vec<UnitInfo> = stream.iter().enumerate()
            .map(|(i, &(k, t, _))| UnitInfo::new(i as u64, k).layer(t)).collect();
        let mut tracker = SenderTracker::new(1024);
        let mut gate = ReceiverGate::new(Duration::from_millis(50));
        let mut cancelled = std::collections::HashSet::new();
        for (u, &(_, _, expire)) in units.iter().zip(&stream) {
            if !tracker.produce(*u) {
                cancelled.insert(u.index);
            } else if expire && u.kind != FrameKind::ParameterSets {
                cancelled.insert(u.index);
                cancelled.extend(tracker.drop_unit(u.index, DropReason::Expired));
            }
        }
        // The receiver is told of each cancelled unit with its info (a note from the sender).
        for u in &units {
            if cancelled.contains(&u.index) {
                gate.missing(now, u.index, Some(*u));
            } else {
                prop_assert_eq!(gate.receive(now, *u), Verdict::Decode, "unit {}", u.index);
            }
        }
    }

    #[test]
    fn tracker_and_gate_never_panic_on_any_sequence(
        events in prop::collection::vec((any::<u64>(), kind(), any::<u8>(), any::<bool>(), 0u8..4), 0..60),
    ) {
        let t0 = Instant::now();
        let mut tracker = SenderTracker::new(16);
        let mut gate = ReceiverGate::new(Duration::from_millis(10));
        for (i, &(index, kind, tid, rasl, op)) in events.iter().enumerate() {
            let now = t0 + Duration::from_millis(i as u64);
            let u = UnitInfo { skipped_at_random_access: rasl, ..UnitInfo::new(index, kind).layer(tid) };
            match op {
                0 => { tracker.produce(u); gate.receive(now, u); }
                1 => { tracker.drop_unit(index, DropReason::Lost); gate.missing(now, index, Some(u)); }
                2 => { gate.missing(now, index, None); }
                _ => { gate.poll_keyframe_request(now); }
            }
            prop_assert!(tracker.tracked() <= 16);
            let _ = (tracker.counters().total(), gate.counters().total(), gate.poll_timeout());
        }
    }
}
