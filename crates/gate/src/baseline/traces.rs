//! Trace runs in a store: `traces.<name>` holds the newest `keep` attributions recorded under
//! that name (`baseline update --traces … --name NAME`), oldest first, each with its per-step
//! samples, so that `check --traces` can judge the current traces against the spread of several
//! captures rather than against one summary.
//!
//! A store written before trace history existed holds a single attribution object under the
//! name; it reads as a history of one run and is written back as a list.

use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use commgate_trace::attribute::Attribution;

/// The trace runs stored under one name, oldest first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TraceRuns(pub Vec<Attribution>);

impl TraceRuns {
    /// The newest run, if any.
    pub fn newest(&self) -> Option<&Attribution> {
        self.0.last()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Appends `run` unless an identical run is already held (a retried update changes
    /// nothing), then keeps the newest `keep`. Returns whether it was added and how many old
    /// runs were dropped.
    pub fn add(&mut self, run: Attribution, keep: usize) -> (bool, usize) {
        // Compared as the store will hold it: a fresh attribution and the same one read back
        // from the store file can differ in memory (figures the file does not keep), and a
        // retried update must still find its copy.
        let run = as_stored(run);
        if self.0.iter().any(|held| same_capture(held, &run)) {
            return (false, 0);
        }
        self.0.push(run);
        let dropped = self.0.len().saturating_sub(keep.max(1));
        self.0.drain(..dropped);
        (true, dropped)
    }

    /// Why these runs cannot be judged together, naming the run (`traces.<name>[2]`): runs of a
    /// different world size are another job, and a run stored twice would count twice.
    pub fn validate(&self, name: &str) -> Result<(), String> {
        let at = |i: usize| format!("`traces.{}[{i}]`", name.escape_debug());
        let Some((newest, older)) = self.0.split_last() else {
            return Err(format!("`traces.{}` holds no trace runs; remove the empty entry", name.escape_debug()));
        };
        for (i, run) in older.iter().enumerate() {
            if run.source.world_size != newest.source.world_size {
                return Err(format!(
                    "{} has {} ranks but the newest trace run ({}) has {}; a trace baseline's runs must \
                     come from one job: remove the runs that differ, or store them under another --name",
                    at(i),
                    run.source.world_size,
                    at(older.len()),
                    newest.source.world_size
                ));
            }
            if let Some(j) = older.iter().take(i).position(|r| r == run) {
                return Err(format!("{} is the same trace run as {}; delete one copy", at(i), at(j)));
            }
        }
        for (i, run) in self.0.iter().enumerate() {
            if let Some(field) = negative_figure(run) {
                return Err(format!(
                    "{}: `{field}` is negative; times and sizes in a trace run are never below 0 (was it edited?)",
                    at(i)
                ));
            }
        }
        for (i, run) in older.iter().enumerate() {
            if let Some(j) = older.iter().take(i).position(|r| r == run) {
                return Err(format!("{} is the same trace run as {}; delete one copy", at(i), at(j)));
            }
        }
        if let Some(j) = older.iter().position(|r| r == newest) {
            return Err(format!("{} is the same trace run as {}; delete one copy", at(older.len()), at(j)));
        }
        Ok(())
    }
}

/// Whether two attributions are of the same capture: equal in everything but where their files
/// were read from (a retried job reads the same traces from another workspace path).
fn same_capture(a: &Attribution, b: &Attribution) -> bool {
    let placeless = |run: &Attribution| {
        let mut run = run.clone();
        run.source.files.clear();
        for rank in &mut run.ranks {
            rank.file.clear();
        }
        run
    };
    a.source.files.len() == b.source.files.len() && placeless(a) == placeless(b)
}

/// `run` as a store file gives it back: written and read again (unchanged if that fails, which
/// a valid attribution never does).
fn as_stored(run: Attribution) -> Attribution {
    serde_json::to_string(&run).ok().and_then(|text| serde_json::from_str(&text).ok()).unwrap_or(run)
}

/// The first figure of a stored attribution that is negative (or not a number), as its JSON path:
/// exposed time below 0 would make a regression look like an improvement.
fn negative_figure(run: &commgate_trace::attribute::Attribution) -> Option<String> {
    let bad = |x: f64| x.is_nan() || x < 0.0;
    for (name, h) in &run.by_collective {
        let figures = [
            ("total_comm_ms", h.total_comm_ms),
            ("exposed_comm_ms", h.exposed_comm_ms),
            ("exposed_comm_ms_max_rank", h.exposed_comm_ms_max_rank),
            ("sync_count", h.sync_count),
        ];
        let optional = [("transfer_ms", h.transfer_ms), ("wait_ms", h.wait_ms)];
        let series = h.steps.iter().flat_map(|s| {
            [("steps.exposed_ms", &s.exposed_ms), ("steps.transfer_ms", &s.transfer_ms), ("steps.wait_ms", &s.wait_ms)]
        });
        let found = figures
            .into_iter()
            .find(|&(_, x)| bad(x))
            .map(|(f, _)| f.to_string())
            .or_else(|| optional.into_iter().find(|&(_, x)| x.is_some_and(bad)).map(|(f, _)| f.to_string()))
            .or_else(|| series.into_iter().find(|(_, v)| v.iter().any(|&x| bad(x))).map(|(f, _)| f.to_string()));
        if let Some(field) = found {
            return Some(format!("by_collective.{}.{field}", name.escape_debug()));
        }
    }
    run.ranks.iter().enumerate().find_map(|(i, r)| {
        [("comm_ms", r.comm_ms), ("exposed_ms", r.exposed_ms), ("compute_ms", r.compute_ms)]
            .into_iter()
            .find(|&(_, x)| bad(x))
            .map(|(f, _)| format!("ranks[{i}].{f}"))
    })
}

impl Serialize for TraceRuns {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for TraceRuns {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RunsVisitor)
    }
}

/// A list of attributions, or one (a store from before trace history).
struct RunsVisitor;

impl<'de> Visitor<'de> for RunsVisitor {
    type Value = TraceRuns;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of trace attributions (or one attribution)")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TraceRuns, A::Error> {
        let mut runs = Vec::new();
        while let Some(run) = seq.next_element::<Attribution>()? {
            runs.push(run);
        }
        Ok(TraceRuns(runs))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TraceRuns, A::Error> {
        let one = Attribution::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(TraceRuns(vec![one]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_trace::attribute::{attribute_events, CommEvent};

    fn run(exposed: f64) -> Attribution {
        attribute_events(vec!["t".into()], &[CommEvent::new("all_reduce", exposed, 4096.0, 0.1)])
    }

    /// Negative exposed time would make a slower run look faster: refused, naming the field.
    #[test]
    fn a_negative_figure_is_refused_naming_the_field() {
        let runs = TraceRuns(vec![run(1.0), run(-2.0)]);
        let e = runs.validate("default").unwrap_err();
        assert!(e.contains("`traces.default[1]`") && e.contains("by_collective.all_reduce."), "{e}");
        assert_eq!(TraceRuns(vec![run(1.0), run(2.0)]).validate("default"), Ok(()));
    }

    #[test]
    fn one_attribution_reads_as_a_history_of_one_and_is_written_as_a_list() {
        let one = serde_json::to_value(run(1.0)).expect("json");
        let runs: TraceRuns = serde_json::from_value(one).expect("reads");
        assert_eq!(runs, TraceRuns(vec![run(1.0)]));
        let list = serde_json::to_value(&runs).expect("json");
        assert!(list.is_array());
        assert_eq!(serde_json::from_value::<TraceRuns>(list).expect("reads back"), runs);
        let bad = serde_json::from_value::<TraceRuns>(serde_json::json!(3)).unwrap_err().to_string();
        assert!(bad.contains("a list of trace attributions"), "{bad}");
    }

    #[test]
    fn adding_keeps_the_newest_and_ignores_a_run_already_held() {
        let mut runs = TraceRuns::default();
        for i in 0..4 {
            assert_eq!(runs.add(run(f64::from(i)), 3), (true, usize::from(i == 3)));
        }
        assert_eq!(runs.add(run(3.0), 3), (false, 0));
        let kept: Vec<f64> = runs.0.iter().map(|a| a.by_collective["all_reduce"].exposed_comm_ms).collect();
        assert_eq!(kept, [1.0, 2.0, 3.0]);
    }

    #[test]
    fn runs_of_another_job_or_stored_twice_are_refused_by_position() {
        let mut runs = TraceRuns(vec![run(1.0), run(2.0), run(3.0)]);
        assert_eq!(runs.validate("nightly"), Ok(()));
        runs.0[0].source.world_size = 8;
        let e = runs.validate("nightly").unwrap_err();
        assert!(e.starts_with("`traces.nightly[0]` has 8 ranks but the newest trace run (`traces.nightly[2]`)"), "{e}");
        let twice = TraceRuns(vec![run(1.0), run(2.0), run(1.0)]);
        assert_eq!(
            twice.validate("n").unwrap_err(),
            "`traces.n[2]` is the same trace run as `traces.n[0]`; delete one copy"
        );
        assert!(TraceRuns::default().validate("n").unwrap_err().contains("holds no trace runs"));
    }
}
