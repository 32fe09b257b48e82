//! The experiments the lab knows, and the kind of a scenario file: its `kind = "..."`, or for a
//! file written before kinds had names, the one table of a kind it has.

use std::path::Path;

use super::Experiment;
use crate::render::{SCENARIO, SCENARIO_AS_RUN};

/// Every kind of experiment. A new kind is one line here (see the module doc of
/// [`crate::experiment`]).
pub static EXPERIMENTS: &[&dyn Experiment] = &[
    &crate::streams::Streams,
    &crate::rdc::experiment::Rdc,
    &crate::bwss::experiment::Bwss,
];

/// A file's kind, and whether it was inferred (the file has no `kind`).
#[derive(Debug, Clone, Copy)]
pub struct Resolved {
    pub experiment: &'static dyn Experiment,
    pub inferred: bool,
}

impl Resolved {
    /// For a file without `kind`: what it was taken for, and the line to add.
    pub fn warning(&self) -> Option<String> {
        if !self.inferred {
            return None;
        }
        let kind = self.experiment.kind();
        let why = match self.experiment.section() {
            Some(section) => format!("it has a [{section}] table"),
            None => format!("it has no {} table", own_tables()),
        };
        Some(format!(
            "no kind = \"...\" line, read as kind = \"{kind}\" ({why}); \
             add kind = \"{kind}\" at the top of the file"
        ))
    }
}

/// Why a file's kind cannot be told.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KindError {
    #[error("the scenario does not parse: {0}")]
    Toml(toml::de::Error),
    #[error("kind = {value} is not a name: the known kinds are {}", known())]
    NotAName { value: String },
    #[error(
        "kind = \"{kind}\" is not an experiment the lab knows: the known kinds are {}",
        known()
    )]
    Unknown { kind: String },
    #[error("kind = \"{kind}\" needs a [{section}] table, and the file has none")]
    MissingSection {
        kind: &'static str,
        section: &'static str,
    },
    #[error(
        "kind = \"{kind}\", but the file has a [{section}] table, which belongs to kind = \"{owner}\""
    )]
    Mismatch {
        kind: &'static str,
        section: &'static str,
        owner: &'static str,
    },
    #[error(
        "the file has tables of several kinds ({sections}): say which it is with kind = \"...\" \
         (one of {})",
        known()
    )]
    Ambiguous { sections: String },
}

// The messages above show the inner error, so `source()` does not return it again (a printer
// of the whole chain would say it twice): `From` by hand instead of `#[from]`.
impl From<toml::de::Error> for KindError {
    fn from(e: toml::de::Error) -> Self {
        KindError::Toml(e)
    }
}

/// The kind of a scenario file's text: its `kind`, checked against the tables it has, or
/// inferred from them when it has none.
pub fn resolve(text: &str) -> Result<Resolved, KindError> {
    let doc: toml::Table = text.parse()?;
    // The experiments whose own table the file has.
    let present: Vec<&'static dyn Experiment> = EXPERIMENTS
        .iter()
        .copied()
        .filter(|e| {
            e.section()
                .is_some_and(|s| doc.get(s).is_some_and(toml::Value::is_table))
        })
        .collect();
    let experiment = match doc.get("kind") {
        None => {
            let experiment = match present.as_slice() {
                [] => default_kind(),
                [one] => *one,
                several => {
                    let sections: Vec<String> = several
                        .iter()
                        .filter_map(|e| e.section())
                        .map(|s| format!("[{s}]"))
                        .collect();
                    return Err(KindError::Ambiguous {
                        sections: sections.join(", "),
                    });
                }
            };
            return Ok(Resolved {
                experiment,
                inferred: true,
            });
        }
        Some(toml::Value::String(kind)) => {
            by_kind(kind).ok_or_else(|| KindError::Unknown { kind: kind.clone() })?
        }
        Some(other) => {
            return Err(KindError::NotAName {
                value: other.to_string(),
            })
        }
    };
    if let Some(section) = experiment.section() {
        if !present.iter().any(|e| e.kind() == experiment.kind()) {
            return Err(KindError::MissingSection {
                kind: experiment.kind(),
                section,
            });
        }
    }
    if let Some(owner) = present.iter().find(|e| e.kind() != experiment.kind()) {
        return Err(KindError::Mismatch {
            kind: experiment.kind(),
            section: owner.section().unwrap_or_default(),
            owner: owner.kind(),
        });
    }
    Ok(Resolved {
        experiment,
        inferred: false,
    })
}

/// The experiment of a run folder, from the scenario it keeps (`scenario.toml`, or
/// `scenario-as-run.toml` where only that is kept). A folder written before kinds had names
/// is inferred without a warning: it is the lab's output, not a file to edit. A folder with
/// neither file is taken for the default kind, whose `report` then says what is missing.
pub fn of_run_folder(dir: &Path) -> Result<&'static dyn Experiment, KindError> {
    let text = [SCENARIO, SCENARIO_AS_RUN]
        .iter()
        .find_map(|name| std::fs::read_to_string(dir.join(name)).ok());
    match text {
        Some(text) => Ok(resolve(&text)?.experiment),
        None => Ok(default_kind()),
    }
}

/// The experiment of this `kind`.
pub fn by_kind(kind: &str) -> Option<&'static dyn Experiment> {
    EXPERIMENTS.iter().copied().find(|e| e.kind() == kind)
}

/// The kind of a file with none of the kinds' own tables.
fn default_kind() -> &'static dyn Experiment {
    EXPERIMENTS
        .iter()
        .copied()
        .find(|e| e.section().is_none())
        .expect("one experiment has no section of its own (the registry's test)")
}

/// The known kinds, quoted: `"streams", "rdc", "bwss"`.
pub fn known() -> String {
    let names: Vec<String> = EXPERIMENTS
        .iter()
        .map(|e| format!("\"{}\"", e.kind()))
        .collect();
    names.join(", ")
}

/// The kinds' own tables: `[rdc] or [bwss]`.
fn own_tables() -> String {
    let names: Vec<String> = EXPERIMENTS
        .iter()
        .filter_map(|e| e.section())
        .map(|s| format!("[{s}]"))
        .collect();
    names.join(" or ")
}
