//! The encoded-video model on streams from real encoders (`fixtures/make-fixtures.sh`: x264,
//! x265, x265 with a temporal sub-layer, libvpx VP8 and VP9, libaom AV1; 64x64, 20 frames, a
//! keyframe every 8). The expected
//! counts are ffprobe's, printed by the script. The decodability tests drop a unit, pass the
//! rest through the sender's tracker and the receiver's gate, write what the gate lets
//! through and have ffmpeg decode it: no error may be reported. They print
//! "skipped: ffmpeg not installed" where it is absent (CI installs it, `run.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lowtide_media::encoded::{
    write_ivf_frame, AccessUnit, AnnexBReader, Codec, DropReason, FrameKind, H264Framer,
    H265Framer, IvfFramer, IvfHeader, NalFramer, ReceiverGate, SenderTracker, Verdict,
};

const FRAMES: usize = 20;
const KEYFRAMES: [usize; 3] = [0, 8, 16];

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn fixture(name: &str) -> Vec<u8> {
    let p = fixture_path(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn annexb<F: NalFramer>(framer: F, data: &[u8], chunk: usize, now: Instant) -> Vec<AccessUnit> {
    let mut r = AnnexBReader::new(framer, 1 << 20);
    let mut units = Vec::new();
    for c in data.chunks(chunk) {
        units.extend(r.push(c, now).expect("valid stream"));
    }
    units.extend(r.finish().expect("valid end"));
    units
}

fn read_fixture(name: &str) -> (Vec<AccessUnit>, Option<IvfHeader>) {
    let data = fixture(name);
    if name.ends_with(".h264") {
        (
            annexb(H264Framer::new(1 << 20), &data, 1000, Instant::now()),
            None,
        )
    } else if name.ends_with(".h265") {
        (
            annexb(H265Framer::new(1 << 20), &data, 1000, Instant::now()),
            None,
        )
    } else {
        let mut r = IvfFramer::new(1 << 20);
        let mut units = Vec::new();
        for c in data.chunks(1000) {
            units.extend(r.push(c, Instant::now()).expect("valid IVF"));
        }
        r.finish().expect("whole IVF");
        (units, r.header().copied())
    }
}

fn pictures(units: &[AccessUnit]) -> Vec<&AccessUnit> {
    units
        .iter()
        .filter(|u| u.kind != FrameKind::ParameterSets)
        .collect()
}

fn keyframe_positions(units: &[AccessUnit]) -> Vec<usize> {
    let pics = pictures(units);
    (0..pics.len())
        .filter(|&i| pics[i].kind == FrameKind::Keyframe)
        .collect()
}

#[test]
fn every_fixture_splits_into_ffprobes_frames_and_keyframes() {
    for (name, codec) in [
        ("h264-ippp.h264", Codec::H264),
        ("h264-bframes.h264", Codec::H264),
        ("h265.h265", Codec::H265),
        ("h265-temporal.h265", Codec::H265),
        ("vp8.ivf", Codec::Vp8),
        ("vp9.ivf", Codec::Vp9),
        ("av1.ivf", Codec::Av1),
    ] {
        let (units, _) = read_fixture(name);
        assert!(units.iter().all(|u| u.codec == codec), "{name}");
        assert_eq!(pictures(&units).len(), FRAMES, "{name}: frames");
        assert_eq!(keyframe_positions(&units), KEYFRAMES, "{name}: keyframes");
        assert!(
            units.iter().enumerate().all(|(i, u)| u.index == i as u64),
            "{name}: indices"
        );
        let kinds: String = units
            .iter()
            .map(|u| match u.kind {
                FrameKind::ParameterSets => 'S',
                FrameKind::Keyframe => 'K',
                FrameKind::Reference => 'R',
                FrameKind::NonReference => 'n',
            })
            .collect();
        println!("{name}: {kinds}");
        // Parameter sets (or AV1's sequence header) come with every keyframe.
        let with_ps = match codec {
            Codec::H264 | Codec::H265 => units
                .iter()
                .filter(|u| u.kind == FrameKind::ParameterSets)
                .count(),
            Codec::Av1 => units.iter().filter(|u| u.has_parameter_sets).count(),
            _ => KEYFRAMES.len(),
        };
        assert_eq!(with_ps, KEYFRAMES.len(), "{name}: parameter sets");
    }
}

#[test]
fn b_frames_are_non_reference() {
    let (units, _) = read_fixture("h264-bframes.h264");
    // ffprobe: 10 B-frames (b-pyramid none: none of them is a reference).
    let n = units
        .iter()
        .filter(|u| u.kind == FrameKind::NonReference)
        .count();
    assert_eq!(n, 10);
    let (ippp, _) = read_fixture("h264-ippp.h264");
    assert!(ippp.iter().all(|u| u.kind != FrameKind::NonReference));
    let (hevc, _) = read_fixture("h265.h265");
    assert!(hevc.iter().any(|u| u.kind == FrameKind::NonReference));
}

#[test]
fn chunking_does_not_change_the_units() {
    let now = Instant::now();
    for name in ["h264-bframes.h264", "h265.h265"] {
        let data = fixture(name);
        let read = |chunk| {
            if name.ends_with(".h264") {
                annexb(H264Framer::new(1 << 20), &data, chunk, now)
            } else {
                annexb(H265Framer::new(1 << 20), &data, chunk, now)
            }
        };
        let whole = read(data.len());
        for chunk in [1, 2, 3, 5, 4096] {
            assert!(read(chunk) == whole, "{name}: chunks of {chunk} bytes");
        }
    }
}

/// Drops unit `drop` and gates the rest. With `use_tracker`, as a sender would: units are
/// produced one by one, the drop is learnt two units later (they were queued), the tracker's
/// list is cancelled and later units it refuses are not sent. Returns the units the gate let
/// through and the gate.
fn drop_and_gate(
    units: &[AccessUnit],
    drop: u64,
    use_tracker: bool,
) -> (Vec<AccessUnit>, ReceiverGate) {
    let now = Instant::now();
    let mut tracker = SenderTracker::new(256);
    let mut cancelled = vec![drop];
    for u in units {
        if !tracker.produce(u.info()) {
            cancelled.push(u.index);
        }
        if u.index == drop + 2 && use_tracker {
            cancelled.extend(tracker.drop_unit(drop, DropReason::Expired));
        }
    }
    if !use_tracker {
        cancelled.truncate(1);
    }
    let mut gate = ReceiverGate::new(Duration::from_millis(100));
    let mut out = Vec::new();
    for u in units {
        if cancelled.contains(&u.index) {
            // lowtide's cancel notice; the unit's info travels in its message header, which
            // a cancelled message never delivers, so the gate must assume the worst.
            gate.missing(now, u.index, None);
        } else if gate.receive(now, u.info()) == Verdict::Decode {
            out.push(u.clone());
        }
    }
    (out, gate)
}

fn write_stream(units: &[AccessUnit], header: Option<IvfHeader>, path: &Path) {
    let mut bytes = Vec::new();
    if let Some(mut h) = header {
        h.frame_count = units.len() as u32;
        bytes.extend_from_slice(&h.to_bytes());
        for u in units {
            write_ivf_frame(&mut bytes, u.pts.unwrap_or(0), &u.data);
        }
    } else {
        for u in units {
            bytes.extend_from_slice(&u.data);
        }
    }
    std::fs::write(path, bytes).unwrap();
}

fn ffmpeg_errors(path: &Path) -> Option<String> {
    let run = Command::new("ffmpeg")
        .args(["-v", "error", "-nostdin", "-i"])
        .arg(path)
        .args(["-f", "null", "-"])
        .output();
    match run {
        Ok(o) => Some(String::from_utf8_lossy(&o.stderr).into_owned()),
        Err(_) => None,
    }
}

/// The MD5 of each picture ffmpeg decodes (`-f framemd5`).
fn frame_hashes(path: &Path) -> Vec<String> {
    let o = Command::new("ffmpeg")
        .args(["-v", "error", "-nostdin", "-i"])
        .arg(path)
        .args(["-f", "framemd5", "-"])
        .output()
        .expect("ffmpeg runs");
    let text = String::from_utf8_lossy(&o.stdout);
    let lines = text.lines().filter(|l| !l.starts_with('#'));
    lines
        .filter_map(|l| l.rsplit(',').next())
        .map(|h| h.trim().to_string())
        .collect()
}

fn decoded_frames(path: &Path) -> usize {
    let o = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args(["-show_entries", "stream=nb_read_frames", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .expect("ffprobe runs where ffmpeg does");
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .expect("a count")
}

fn out_path(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    dir.join(format!("gated-{}-{name}", std::process::id()))
}

/// Drops the unit of picture `pic` of fixture `name` (with and without the sender's
/// tracker), gates the rest and checks what ffmpeg says; returns the pictures kept.
fn decodable_after_drop(name: &str, pic: usize, kept: usize) {
    let (units, header) = read_fixture(name);
    let victim = pictures(&units)[pic].index;
    for use_tracker in [true, false] {
        let (out, gate) = drop_and_gate(&units, victim, use_tracker);
        assert_eq!(
            pictures(&out).len(),
            kept,
            "{name}: pictures through the gate"
        );
        assert!(out.iter().all(|u| u.index != victim));
        let c = gate.counters();
        println!("{name} drop picture {pic} (tracker {use_tracker}): {c:?}");
        if use_tracker {
            assert_eq!(
                c.waiting_for_keyframe + c.dependency_broken,
                0,
                "the tracker took them"
            );
        }
        let path = out_path(&format!("{use_tracker}-{name}"));
        write_stream(&out, header, &path);
        let Some(errors) = ffmpeg_errors(&path) else {
            println!("skipped: ffmpeg not installed");
            return;
        };
        assert_eq!(errors, "", "{name}: ffmpeg reported errors");
        assert_eq!(decoded_frames(&path), kept, "{name}: frames ffmpeg decoded");
        // ffmpeg conceals a missing reference without a word at `-v error` (see
        // `without_the_gate_pictures_differ`): so every picture must also be the very
        // picture the undamaged stream decodes to (testsrc's pictures all differ).
        let original = frame_hashes(&fixture_path(name));
        let gated = frame_hashes(&path);
        assert_eq!(gated.len(), kept);
        assert!(
            gated.iter().all(|h| original.contains(h)),
            "{name}: a picture differs"
        );
        println!("{name}: ffmpeg decoded {kept} frames without an error, each as in the original");
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn h264_reference_dropped_mid_gop_decodes_cleanly() {
    // P at 3 lost: 3..=7 go, the keyframe at 8 resumes.
    decodable_after_drop("h264-ippp.h264", 3, FRAMES - 5);
}

#[test]
fn h264_non_reference_dropped_costs_one_frame() {
    let (units, _) = read_fixture("h264-bframes.h264");
    let pics = pictures(&units);
    let b = (0..pics.len())
        .find(|&i| pics[i].kind == FrameKind::NonReference)
        .unwrap();
    let (out, gate) = drop_and_gate(&units, pics[b].index, true);
    // The cancel notice carries no kind: the gate assumes a reference was lost.
    assert!(pictures(&out).len() < FRAMES - 1);
    assert_eq!(gate.counters().lost, 1);
    // With the unit's info (sent ahead, or known from the stream's structure) only it goes.
    let now = Instant::now();
    let mut gate = ReceiverGate::new(Duration::from_millis(100));
    let mut kept = Vec::new();
    for u in &units {
        if u.index == pics[b].index {
            gate.missing(now, u.index, Some(u.info()));
        } else if gate.receive(now, u.info()) == Verdict::Decode {
            kept.push(u.clone());
        }
    }
    assert_eq!(pictures(&kept).len(), FRAMES - 1);
    let path = out_path("bframes.h264");
    write_stream(&kept, None, &path);
    match ffmpeg_errors(&path) {
        Some(e) => {
            assert_eq!(e, "", "ffmpeg reported errors");
            assert_eq!(decoded_frames(&path), FRAMES - 1);
            let original = frame_hashes(&fixture_path("h264-bframes.h264"));
            assert!(frame_hashes(&path).iter().all(|h| original.contains(h)));
        }
        None => println!("skipped: ffmpeg not installed"),
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn h265_reference_dropped_mid_gop_decodes_cleanly() {
    // Units in decode order; the first picture after the keyframe is a reference (P).
    let (units, _) = read_fixture("h265.h265");
    let pics = pictures(&units);
    let p = (1..8)
        .find(|&i| pics[i].kind == FrameKind::Reference)
        .unwrap();
    decodable_after_drop("h265.h265", p, FRAMES - (8 - p));
}

#[test]
fn vp8_vp9_av1_reference_dropped_mid_gop_decode_cleanly() {
    for name in ["vp8.ivf", "vp9.ivf", "av1.ivf"] {
        decodable_after_drop(name, 3, FRAMES - 5);
    }
}

/// The control: without the gate, a stream missing a reference still decodes "without an
/// error" at `-v error`, but to pictures the encoder never made.
#[test]
fn without_the_gate_pictures_differ() {
    for name in [
        "h264-ippp.h264",
        "h265.h265",
        "vp8.ivf",
        "vp9.ivf",
        "av1.ivf",
    ] {
        let (units, header) = read_fixture(name);
        let pics = pictures(&units);
        let victim = pics[1..]
            .iter()
            .find(|u| u.kind == FrameKind::Reference)
            .unwrap()
            .index;
        let rest: Vec<AccessUnit> = units.into_iter().filter(|u| u.index != victim).collect();
        let path = out_path(&format!("ungated-{name}"));
        write_stream(&rest, header, &path);
        let Some(errors) = ffmpeg_errors(&path) else {
            println!("skipped: ffmpeg not installed");
            return;
        };
        let original = frame_hashes(&fixture_path(name));
        let wrong = frame_hashes(&path)
            .iter()
            .filter(|h| !original.contains(h))
            .count();
        println!("{name} without the gate: errors {errors:?}, {wrong} wrong pictures");
        assert!(wrong > 0, "{name}");
        let _ = std::fs::remove_file(&path);
    }
}

/// x265 with `temporal-layers=1` puts its non-reference B-frames in sub-layer 1 (TSA_N) and
/// declares two sub-layers: they are non-reference, the rest of layer 0 references. A lost
/// layer-1 picture, whose info the gate is told, costs that picture alone.
#[test]
fn h265_temporal_sub_layer_is_droppable() {
    let (units, _) = read_fixture("h265-temporal.h265");
    let pics = pictures(&units);
    let upper: Vec<&AccessUnit> = pics
        .iter()
        .copied()
        .filter(|u| u.temporal_id == 1)
        .collect();
    // ffprobe counts 12 B-frames: 7 unreferenced ones in layer 1, 5 references in layer 0.
    assert_eq!(upper.len(), 7);
    assert!(upper.iter().all(|u| u.kind == FrameKind::NonReference));
    assert!(pics
        .iter()
        .all(|u| u.temporal_id == 1 || u.kind != FrameKind::NonReference));
    let now = Instant::now();
    let mut tracker = SenderTracker::new(256);
    let mut gate = ReceiverGate::new(Duration::from_millis(100));
    let mut kept = Vec::new();
    let dropped: Vec<u64> = upper.iter().step_by(2).map(|u| u.index).collect();
    for u in &units {
        assert!(tracker.produce(u.info()));
        if dropped.contains(&u.index) {
            assert_eq!(
                tracker.drop_unit(u.index, DropReason::Expired),
                Vec::<u64>::new()
            );
            gate.missing(now, u.index, Some(u.info()));
        } else {
            assert_eq!(gate.receive(now, u.info()), Verdict::Decode);
            kept.push(u.clone());
        }
    }
    assert_eq!(gate.poll_keyframe_request(now), None);
    let expected = FRAMES - dropped.len();
    let path = out_path("temporal.h265");
    write_stream(&kept, None, &path);
    match ffmpeg_errors(&path) {
        Some(e) => {
            assert_eq!(e, "", "ffmpeg reported errors");
            let original = frame_hashes(&fixture_path("h265-temporal.h265"));
            let hashes = frame_hashes(&path);
            assert_eq!(hashes.len(), expected);
            assert!(hashes.iter().all(|h| original.contains(h)));
            println!("h265-temporal: ffmpeg decoded {expected} frames without an error, each as in the original");
        }
        None => println!("skipped: ffmpeg not installed"),
    }
    let _ = std::fs::remove_file(&path);
}
