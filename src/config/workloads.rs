//! Which workloads `commgate bench` runs: the `[workloads.<name>]` tables of `commgate.toml`,
//! `--payload-sizes` (one workload per size) and `--workload` (the id of the one workload, or
//! which table to run). Each workload's values are flags, then environment, then its table,
//! then `[bench]`, then the backend's defaults; a table's value that is refused names
//! `file:line:column` of its key. `check` declares its workloads the same way and judges each.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail, Result};
use serde::Deserialize;

use super::{bench_flags, FileConfig};
use crate::cli::BenchArgs;
use commgate_bench::origin::{Origin, Setting};
use commgate_bench::settings::BenchRequest;
use commgate_bench::settings::Declared;
use commgate_bench::sizes::{Given, Sizes};
use commgate_bench::workload::{elements_of, parse_size, validate_id, IdChoice};
use commgate_bench::Dtype;

/// A `[workloads.<name>]` table: the benchmark parameters of one workload.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadTable {
    /// The id (default: derived from what it measures).
    pub id: Option<String>,
    pub collective: Option<Collective>,
    pub dtype: Option<Dtype>,
    pub payload_elements: Option<u64>,
    pub compute_dim: Option<u64>,
    pub world_size: Option<u32>,
    pub warmup: Option<u32>,
    pub repeats: Option<u32>,
}

impl WorkloadTable {
    /// The sizes and counts the table sets.
    pub fn sizes(&self) -> Sizes<Given> {
        Sizes {
            world_size: self.world_size,
            payload_elements: self.payload_elements,
            compute_dim: self.compute_dim,
            warmup: self.warmup,
            repeats: self.repeats,
        }
    }
}

/// The collective a workload times. Only the all-reduce exists; the key is there so a file that
/// asks for another one is refused rather than silently measuring an all-reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Collective {
    #[serde(rename = "all_reduce", alias = "allreduce")]
    AllReduce,
}

/// The workloads to run, in order: see the module doc.
pub(super) fn declare(
    args: BenchArgs,
    file: &FileConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Vec<Declared>> {
    let name = match args.workload {
        Some(w) => {
            validate_id(&w).map_err(|e| anyhow!("--workload {}: {e}", w.escape_debug()))?;
            Some(w)
        }
        None => None,
    };
    let dtype_given = args.flags.settings.dtype.is_some();
    let mut base = bench_flags(args.flags, file, &env)?;
    base.run.output = args.output;
    base.run.dry_run = args.dry_run;
    let declared = if !args.payload_sizes.is_empty() {
        if !file.workloads.is_empty() {
            bail!(
                "--payload-sizes makes its own workloads, but {} declares [workloads] tables: leave out \
                 --payload-sizes, or declare each size as a table",
                file.path().display()
            );
        }
        by_size(&base, &args.payload_sizes, name)?
    } else if !file.workloads.is_empty() {
        let positions = Positions::of(file);
        let chosen = choose(file, name.as_deref())?;
        chosen
            .into_iter()
            .map(|(table_name, table)| from_table(&base, table_name, table, dtype_given, file, &positions))
            .collect::<Result<Vec<_>>>()?
    } else {
        let workload = name.map_or(IdChoice::Legacy, IdChoice::Named);
        vec![Declared { label: "the command line".to_string(), request: BenchRequest { workload, ..base } }]
    };
    if declared.len() > 1 {
        if let Some(out) = &declared[0].request.run.output {
            bail!(
                "--output {} names one result file, but {} workloads will run: leave out --output and give \
                 --results-dir DIR (each result is named after its workload)",
                out.display(),
                declared.len()
            );
        }
    }
    for d in &declared {
        d.request.sizes.each_within_limits()?;
    }
    Ok(declared)
}

/// One workload per `--payload-sizes` entry, with the command line's and `[bench]`'s other values.
fn by_size(base: &BenchRequest, entries: &[String], name: Option<String>) -> Result<Vec<Declared>> {
    if entries.len() > 1 {
        if let Some(n) = &name {
            bail!(
                "--workload {n} names one workload, but --payload-sizes gives {}: leave out --workload (each size \
                 gets an id derived from what it measures)",
                entries.len()
            );
        }
    }
    let workload = name.map_or(IdChoice::Derived, IdChoice::Named);
    entries
        .iter()
        .map(|entry| {
            let shown = entry.escape_debug();
            let bytes = parse_size(entry).map_err(|e| anyhow!("--payload-sizes entry {shown}: {e}"))?;
            let Some(elements) = elements_of(bytes, base.dtype) else {
                bail!(
                    "--payload-sizes entry {shown}: {bytes} bytes is not a whole number of {} elements ({} bytes \
                     each); give a multiple of {}",
                    base.dtype.as_str(),
                    base.dtype.size(),
                    base.dtype.size()
                );
            };
            Ok(Declared {
                label: format!("--payload-sizes entry {shown}"),
                request: BenchRequest {
                    sizes: Sizes {
                        payload_elements: Some(Setting::new(elements, Origin::Flag("--payload-sizes"))),
                        ..base.sizes.clone()
                    },
                    workload: workload.clone(),
                    ..base.clone()
                },
            })
        })
        .collect()
}

/// The tables to run: all of them, or the one `--workload` names (by table name or `id`).
fn choose<'a>(file: &'a FileConfig, name: Option<&str>) -> Result<Vec<(&'a str, &'a WorkloadTable)>> {
    let all = file.workloads.iter().map(|(n, t)| (n.as_str(), t));
    let Some(name) = name else { return Ok(all.collect()) };
    let picked: Vec<_> = all.filter(|(n, t)| *n == name || t.id.as_deref() == Some(name)).collect();
    if picked.is_empty() {
        let names: Vec<String> = file.workloads.keys().map(|k| k.escape_debug().to_string()).collect();
        bail!(
            "--workload {name}: {} declares no such workload; its [workloads] tables are {}",
            file.path().display(),
            names.join(", ")
        );
    }
    Ok(picked)
}

/// A table's workload: the flags and environment win over it, it wins over `[bench]`.
fn from_table(
    base: &BenchRequest,
    name: &str,
    t: &WorkloadTable,
    dtype_given: bool,
    file: &FileConfig,
    positions: &Positions,
) -> Result<Declared> {
    let place = |key: &str| positions.place(file.path(), name, key);
    validate_id(name).map_err(|e| anyhow!("{}: the table name [workloads.{}] {e}", place(""), name.escape_debug()))?;
    let workload = match &t.id {
        Some(id) => {
            validate_id(id).map_err(|e| anyhow!("{}: [workloads.{name}] id = {:?}: {e}", place("id"), id))?;
            IdChoice::Named(id.clone())
        }
        None => IdChoice::Derived,
    };
    let origin = |key: &'static str| Origin::Table { place: place(key), table: name.to_string(), key };
    let request = BenchRequest {
        sizes: base.sizes.under(&t.sizes(), origin),
        dtype: if dtype_given { base.dtype } else { t.dtype.unwrap_or(base.dtype) },
        workload,
        ..base.clone()
    };
    Ok(Declared { label: format!("[workloads.{name}]"), request })
}

/// A 1-based line and column.
type At = (usize, usize);

/// Where each table (its name) and each of its keys is written, for messages.
struct Positions(BTreeMap<String, (At, BTreeMap<String, At>)>);

impl Positions {
    fn of(file: &FileConfig) -> Self {
        type Keys = BTreeMap<toml::Spanned<String>, serde::de::IgnoredAny>;
        #[derive(Deserialize)]
        struct Top {
            #[serde(default)]
            workloads: BTreeMap<toml::Spanned<String>, Keys>,
        }
        let Some((_, text)) = &file.provenance.file else { return Positions(BTreeMap::new()) };
        let Ok(top) = toml::from_str::<Top>(text) else { return Positions(BTreeMap::new()) };
        let at = |span: std::ops::Range<usize>| super::origin::line_column(text, span.start);
        Positions(
            top.workloads
                .iter()
                .map(|(table, keys)| {
                    let keys = keys.keys().map(|k| (k.get_ref().clone(), at(k.span()))).collect();
                    (table.get_ref().clone(), (at(table.span()), keys))
                })
                .collect(),
        )
    }

    /// `file:line:column` of `[workloads.<table>] key` (of the table when `key` is empty or
    /// not written), or the file alone.
    fn place(&self, path: &Path, table: &str, key: &str) -> String {
        match self.0.get(table) {
            Some((header, keys)) => {
                let (line, column) = keys.get(key).unwrap_or(header);
                format!("{}:{line}:{column}", path.display())
            }
            None => path.display().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{bench_args as args, file_from_text, parse_file};

    fn file(text: &str) -> FileConfig {
        file_from_text(&[], Path::new("commgate.toml"), text.to_string()).expect("valid settings")
    }

    fn declared(line: &[&str], f: &FileConfig) -> Result<Vec<Declared>> {
        declare(args(line), f, |_| None)
    }

    fn error(line: &[&str], f: &FileConfig) -> String {
        declared(line, f).expect_err("refused").to_string()
    }

    #[test]
    fn the_default_workload_keeps_the_legacy_id_and_a_name_replaces_it() {
        let d = declared(&["--backend", "mock"], &FileConfig::default()).expect("ok");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].request.workload, IdChoice::Legacy);
        let d = declared(&["--workload", "nightly.big"], &FileConfig::default()).expect("ok");
        assert_eq!(d[0].request.workload, IdChoice::Named("nightly.big".into()));
        assert_eq!(
            error(&["--workload", "../x"], &FileConfig::default()),
            "--workload ../x: starts with '.'; a workload id names a file, and would be hidden"
        );
        assert!(error(&["--workload", "a\u{1b}b"], &FileConfig::default()).starts_with("--workload a\\u{1b}b: holds"));
    }

    #[test]
    fn payload_sizes_make_one_workload_each() {
        let d = declared(&["--payload-sizes", "1Mi,64Mi", "--dtype", "float32"], &FileConfig::default()).expect("ok");
        let elements: Vec<u64> =
            d.iter().map(|d| d.request.sizes.payload_elements.as_ref().expect("set").value).collect();
        assert_eq!(elements, [1 << 18, 16 << 20]);
        assert!(d.iter().all(|d| d.request.workload == IdChoice::Derived));
        assert_eq!(d[1].label, "--payload-sizes entry 64Mi");
        assert_eq!(
            error(&["--payload-sizes", "1Mi,lots"], &FileConfig::default()),
            "--payload-sizes entry lots: not a size; give bytes as a whole number with an optional Ki, Mi or Gi \
             suffix (1048576, 64Ki, 1Mi, 2Gi)"
        );
        assert!(error(&["--payload-sizes", "3"], &FileConfig::default())
            .starts_with("--payload-sizes entry 3: 3 bytes is not a whole number of bfloat16 elements (2 bytes each)"));
        assert!(error(&["--payload-sizes", "1Mi,2Mi", "--workload", "w"], &FileConfig::default())
            .starts_with("--workload w names one workload, but --payload-sizes gives 2"));
        assert!(error(&["--payload-sizes", "1Mi,2Mi", "--output", "r.json"], &FileConfig::default())
            .starts_with("--output r.json names one result file, but 2 workloads will run"));
        let tables = file("[workloads.a]\nrepeats = 100\n");
        assert!(error(&["--payload-sizes", "1Mi"], &tables).contains("declares [workloads] tables"));
        let both = ["commgate", "bench", "--payload-sizes", "1Mi", "--payload-elements", "5"];
        assert!(<crate::cli::Cli as clap::Parser>::try_parse_from(both).is_err());
    }

    #[test]
    fn tables_layer_between_the_flags_and_bench() {
        let f = file(
            "[bench]\nrepeats = 150\ncompute_dim = 512\n\n[workloads.small]\npayload_elements = 1024\n\
             dtype = \"float32\"\n\n[workloads.big]\nid = \"big-one\"\npayload_elements = 1048576\nrepeats = 300\n\
             collective = \"all_reduce\"\n",
        );
        let d = declared(&["--backend", "mock", "--compute-dim", "64"], &f).expect("ok");
        let labels: Vec<&str> = d.iter().map(|d| d.label.as_str()).collect();
        assert_eq!(labels, ["[workloads.big]", "[workloads.small]"], "name order");
        let (big, small) = (&d[0].request, &d[1].request);
        assert_eq!(big.workload, IdChoice::Named("big-one".into()));
        assert_eq!(small.workload, IdChoice::Derived);
        assert_eq!(big.sizes.repeats.as_ref().map(|s| s.value), Some(300), "the table beats [bench]");
        assert_eq!(small.sizes.repeats.as_ref().map(|s| s.value), Some(150), "[bench] fills what the table lacks");
        assert_eq!(big.sizes.compute_dim.as_ref().map(|s| s.value), Some(64), "the flag beats both");
        assert_eq!((small.dtype, big.dtype), (Dtype::Float32, Dtype::Bfloat16));
        // `--workload` picks one table, by name or id.
        let one = declared(&["--workload", "big-one"], &f).expect("ok");
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].label, "[workloads.big]");
        assert!(error(&["--workload", "huge"], &f).starts_with(
            "--workload huge: commgate.toml declares no such workload; its [workloads] tables are big, small"
        ));
    }

    #[test]
    fn bad_tables_are_named_by_line_and_column() {
        let e = parse_file("[workloads.a]\nrepeats = 100\n  payload = 5\n").unwrap_err();
        assert!(e.to_string().starts_with("settings:3:3: unknown key `payload`; expected one of id, "), "{e}");
        let e = parse_file("[workloads.a]\ncollective = \"all_gather\"\n").unwrap_err();
        assert_eq!(e.to_string(), "settings:2:14: unknown value `all_gather`; expected one of all_reduce, allreduce");
        let f = file("[workloads.a]\nrepeats = 5\n");
        assert!(
            error(&["--backend", "mock"], &f).starts_with("commgate.toml:2:1: [workloads.a] repeats = 5: at least 20"),
            "{}",
            error(&["--backend", "mock"], &f)
        );
        let f = file("[workloads.a]\n\nid = \".x\"\n");
        assert!(error(&[], &f).starts_with("commgate.toml:3:1: [workloads.a] id = \".x\": starts with '.'"));
        let f = file("[workloads.\"a b\"]\nrepeats = 100\n");
        assert!(error(&[], &f).starts_with("commgate.toml:1:12: the table name [workloads.a b] holds ' '"));
    }
}
