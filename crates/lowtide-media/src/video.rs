//! Layered video: 30 frames a second, each a base layer plus enhancement layers. As in SPEG
//! (Krasic et al. 2003), layer k is useful only with layers 0..k, so a frame's quality is the
//! number of consecutive layers from the base that arrived.

use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// One frame: its index (capture order) and the bytes of each layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Frame {
    pub index: u32,
    pub layers: Vec<u32>,
}

/// A sequence of layered frames at a fixed frame rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Video {
    pub fps: f64,
    pub frames: Vec<Frame>,
}

impl Video {
    pub fn layer_count(&self) -> usize {
        self.frames.first().map_or(0, |f| f.layers.len())
    }

    /// Capture time of frame `i`, seconds from the start.
    pub fn capture_s(&self, i: u32) -> f64 {
        f64::from(i) / self.fps
    }

    /// `seconds` of this video, played in a loop from the start (a 20 s trace for a 60 s run).
    pub fn looped(&self, seconds: f64) -> Video {
        let n = (seconds * self.fps).round().max(1.0) as usize;
        let frames = self
            .frames
            .iter()
            .cycle()
            .take(n)
            .enumerate()
            .map(|(i, f)| Frame {
                index: i as u32,
                layers: f.layers.clone(),
            })
            .collect();
        Video {
            fps: self.fps,
            frames,
        }
    }

    /// Mean bit rate of each layer, bits/s.
    pub fn layer_rates_bps(&self) -> Vec<f64> {
        let n = self.frames.len().max(1) as f64;
        (0..self.layer_count())
            .map(|k| {
                let bytes: u64 = self.frames.iter().map(|f| u64::from(f.layers[k])).sum();
                bytes as f64 * 8.0 * self.fps / n
            })
            .collect()
    }

    /// Loads a trace CSV written by `traces/make-traces.sh`: a header
    /// `frame,layer0,layer1,…` then one line per frame with the bytes of each layer.
    pub fn from_csv(path: &Path, fps: f64) -> Result<Video, VideoError> {
        let text = std::fs::read_to_string(path).map_err(|e| VideoError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::parse_csv(&text, fps).map_err(|reason| VideoError::Parse {
            path: path.display().to_string(),
            reason,
        })
    }

    /// A committed trace by name (`testsrc2-4layer`, `mandelbrot-4layer`), built in so a
    /// scenario can name one from any directory.
    pub fn builtin(name: &str, fps: f64) -> Result<Video, VideoError> {
        let text = BUILTIN_TRACES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| *t)
            .ok_or_else(|| VideoError::Invalid {
                field: "trace".into(),
                value: format!("{name:?}"),
                allowed: format!(
                    "one of {}",
                    BUILTIN_TRACES
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })?;
        Self::parse_csv(text, fps).map_err(|reason| VideoError::Parse {
            path: name.into(),
            reason,
        })
    }

    fn parse_csv(text: &str, fps: f64) -> Result<Video, String> {
        let mut lines = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'));
        let header = lines.next().ok_or("the file is empty")?;
        let columns: Vec<&str> = header.split(',').map(str::trim).collect();
        if columns.first() != Some(&"frame") || columns.len() < 2 || columns.len() > 17 {
            return Err(format!(
                "the header is {header:?}; expected `frame,layer0[,layer1…]` with 1 to 16 layers"
            ));
        }
        let layers = columns.len() - 1;
        let mut frames = vec![];
        for (n, line) in lines.enumerate() {
            let cells: Vec<&str> = line.split(',').map(str::trim).collect();
            if cells.len() != layers + 1 {
                return Err(format!(
                    "data line {} has {} cells, not {}",
                    n + 1,
                    cells.len(),
                    layers + 1
                ));
            }
            let sizes = cells[1..]
                .iter()
                .map(|c| c.parse::<u32>().ok().filter(|b| *b <= 16 << 20))
                .collect::<Option<Vec<u32>>>()
                .ok_or_else(|| {
                    format!(
                        "data line {} has a size that is not 0 to 16 MiB: {line:?}",
                        n + 1
                    )
                })?;
            frames.push(Frame {
                index: frames.len() as u32,
                layers: sizes,
            });
        }
        if frames.is_empty() {
            return Err("the file has no frames".into());
        }
        if !(1.0..=240.0).contains(&fps) {
            return Err(format!("fps {fps} is outside 1 to 240"));
        }
        Ok(Video { fps, frames })
    }
}

/// The traces in `traces/` (made by `traces/make-traces.sh`), by name.
pub const BUILTIN_TRACES: [(&str, &str); 2] = [
    (
        "testsrc2-4layer",
        include_str!("../../../traces/testsrc2-4layer.csv"),
    ),
    (
        "mandelbrot-4layer",
        include_str!("../../../traces/mandelbrot-4layer.csv"),
    ),
];

/// A synthetic layered source: per-layer mean bit rates, a GOP with bigger I-frames, and
/// lognormal-ish variation from frame to frame.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SyntheticModel {
    pub fps: f64,
    /// Mean bit rate of each layer, base first, bits/s.
    pub layer_bps: Vec<f64>,
    /// Frames per group of pictures; the first of each is an I-frame.
    pub gop: u32,
    /// How much bigger an I-frame is than the mean frame of its layer.
    pub i_frame_ratio: f64,
    /// Relative spread of P-frame sizes (0 = constant).
    pub spread: f64,
    pub seed: u64,
}

impl Default for SyntheticModel {
    /// A 4-layer source of about 2 Mbit/s (base 400 kbit/s), GOP 30 at 30 fps.
    fn default() -> Self {
        Self {
            fps: 30.0,
            layer_bps: vec![400e3, 400e3, 600e3, 600e3],
            gop: 30,
            i_frame_ratio: 4.0,
            spread: 0.3,
            seed: 1,
        }
    }
}

impl SyntheticModel {
    pub fn validate(&self) -> Result<(), VideoError> {
        let bad = |field: &str, value: String, allowed: &str| {
            Err(VideoError::Invalid {
                field: field.into(),
                value,
                allowed: allowed.into(),
            })
        };
        if !(1.0..=240.0).contains(&self.fps) {
            return bad("fps", self.fps.to_string(), "1 to 240");
        }
        if self.layer_bps.is_empty() || self.layer_bps.len() > 16 {
            return bad(
                "layer_bps",
                format!("{} layers", self.layer_bps.len()),
                "1 to 16 layers",
            );
        }
        if let Some(r) = self.layer_bps.iter().find(|r| !(1e3..=1e9).contains(*r)) {
            return bad(
                "layer_bps",
                r.to_string(),
                "each layer 1 kbit/s to 1 Gbit/s",
            );
        }
        if !(1..=3600).contains(&self.gop) {
            return bad("gop", self.gop.to_string(), "1 to 3600 frames");
        }
        if !(1.0..=20.0).contains(&self.i_frame_ratio) {
            return bad("i_frame_ratio", self.i_frame_ratio.to_string(), "1 to 20");
        }
        if !(0.0..=1.0).contains(&self.spread) {
            return bad("spread", self.spread.to_string(), "0 to 1");
        }
        Ok(())
    }

    /// `seconds` of video. Each layer keeps its mean rate over a GOP: the I-frame takes
    /// `i_frame_ratio` shares, the P-frames split the rest.
    pub fn generate(&self, seconds: f64) -> Result<Video, VideoError> {
        self.validate()?;
        let mut rng = StdRng::seed_from_u64(self.seed);
        let n = (seconds * self.fps).round().max(1.0) as u32;
        let gop = f64::from(self.gop);
        let frames = (0..n)
            .map(|index| {
                let is_i = index % self.gop == 0;
                let layers = self
                    .layer_bps
                    .iter()
                    .map(|bps| {
                        let mean = bps / 8.0 / self.fps;
                        let p_share = gop / (self.i_frame_ratio + gop - 1.0);
                        let base = if is_i {
                            mean * self.i_frame_ratio * p_share
                        } else {
                            mean * p_share
                        };
                        let noise = if self.spread > 0.0 {
                            (1.0 + self.spread * (rng.gen::<f64>() * 2.0 - 1.0)).max(0.05)
                        } else {
                            1.0
                        };
                        (base * noise).round().max(1.0) as u32
                    })
                    .collect();
                Frame { index, layers }
            })
            .collect();
        Ok(Video {
            fps: self.fps,
            frames,
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum VideoError {
    #[error("cannot read the trace {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("the trace {path} is malformed: {reason}")]
    Parse { path: String, reason: String },
    #[error("invalid `{field}` = {value}: allowed is {allowed}")]
    Invalid {
        field: String,
        value: String,
        allowed: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_layers_keep_their_mean_rates() {
        let m = SyntheticModel {
            spread: 0.2,
            ..SyntheticModel::default()
        };
        let v = m.generate(60.0).unwrap();
        assert_eq!(v.frames.len(), 1800);
        for (got, want) in v.layer_rates_bps().iter().zip(&m.layer_bps) {
            assert!((got / want - 1.0).abs() < 0.05, "{got} vs {want}");
        }
        // I-frames are bigger than the P-frames around them.
        assert!(v.frames[0].layers[0] > 2 * v.frames[1].layers[0]);
    }

    #[test]
    fn csv_traces_parse_and_bad_ones_say_where() {
        let v = Video::parse_csv("frame,layer0,layer1\n0,1000,500\n1,800,400\n", 30.0).unwrap();
        assert_eq!(v.layer_count(), 2);
        assert_eq!(v.frames[1].layers, vec![800, 400]);
        let e = Video::parse_csv("frame,layer0\n0,abc\n", 30.0).unwrap_err();
        assert!(e.contains("data line 1"), "{e}");
        let e = Video::parse_csv("frames;x\n", 30.0).unwrap_err();
        assert!(e.contains("header"), "{e}");
        let e = Video::parse_csv("frame,layer0,layer1\n0,1\n", 30.0).unwrap_err();
        assert!(e.contains("2 cells, not 3"), "{e}");
    }

    #[test]
    fn the_committed_encoder_traces_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces");
        for name in ["testsrc2-4layer.csv", "mandelbrot-4layer.csv"] {
            let v = Video::from_csv(&dir.join(name), 30.0).unwrap();
            assert_eq!((v.frames.len(), v.layer_count()), (600, 4), "{name}");
            let total: f64 = v.layer_rates_bps().iter().sum();
            assert!((2e5..2e7).contains(&total), "{name}: {total} bit/s");
        }
        for (name, _) in BUILTIN_TRACES {
            let file = Video::from_csv(&dir.join(format!("{name}.csv")), 30.0).unwrap();
            assert_eq!(Video::builtin(name, 30.0).unwrap(), file);
        }
        let e = Video::builtin("nope", 30.0).unwrap_err().to_string();
        assert!(e.contains("testsrc2-4layer"), "{e}");
        let e = Video::from_csv(&dir.join("missing.csv"), 30.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.csv"), "{e}");
    }

    #[test]
    fn a_looped_video_repeats_its_frames_with_new_indices() {
        let v = Video::parse_csv("frame,layer0\n0,10\n1,20\n2,30\n", 30.0).unwrap();
        let l = v.looped(0.25); // 7.5 frames: 8
        assert_eq!(l.frames.len(), 8);
        assert_eq!(l.frames[7].index, 7);
        assert_eq!(l.frames[7].layers, vec![20]);
        assert_eq!(v.looped(0.0).frames.len(), 1);
    }

    #[test]
    fn bad_models_name_the_field() {
        let m = SyntheticModel {
            gop: 0,
            ..SyntheticModel::default()
        };
        let e = m.generate(1.0).unwrap_err().to_string();
        assert!(e.contains("`gop` = 0"), "{e}");
    }
}
