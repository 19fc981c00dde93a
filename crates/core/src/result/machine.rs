//! What a run measured on and with: [`Hardware`] (the machine; a baseline is only comparable
//! on the same one, identified by a fingerprint recomputed whenever a file is read), [`Software`]
//! (driver, CUDA, NCCL, commgate, `NCCL_*`: a change here is judged, and named), and
//! [`Provenance`] (where the run came from).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The machine a run measured: what a baseline is only comparable on. Software (driver, CUDA,
/// NCCL, settings) lives in [`Software`], so changing it is judged, not excused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "StoredHardware")]
pub struct Hardware {
    #[serde(default)]
    pub gpu_name: Option<String>,
    #[serde(default)]
    pub gpu_count: u32,
    /// Memory of one GPU, MiB.
    #[serde(default)]
    pub gpu_memory_mib: Option<u64>,
    /// How the GPUs reach each other (`nvlink`, `pcie-p2p`, `no-p2p`, `single-gpu`, …).
    #[serde(default)]
    pub topology: Option<String>,
    /// Nodes the job spans.
    #[serde(default = "one")]
    pub nodes: u32,
    #[serde(default)]
    pub host_cpu: Option<String>,
    /// A hash of the fields above ([`Hardware::compute_fingerprint`]). Recomputed whenever a
    /// file is loaded, so a stored value cannot claim another machine.
    pub fingerprint: String,
}

fn one() -> u32 {
    1
}

/// `Hardware` as a file holds it; the stored fingerprint is read and discarded.
#[derive(Deserialize)]
struct StoredHardware {
    #[serde(default)]
    gpu_name: Option<String>,
    #[serde(default)]
    gpu_count: u32,
    #[serde(default)]
    gpu_memory_mib: Option<u64>,
    #[serde(default)]
    topology: Option<String>,
    #[serde(default = "one")]
    nodes: u32,
    #[serde(default)]
    host_cpu: Option<String>,
    #[serde(default, rename = "fingerprint")]
    _fingerprint: serde::de::IgnoredAny,
}

impl From<StoredHardware> for Hardware {
    fn from(h: StoredHardware) -> Self {
        Hardware {
            gpu_name: h.gpu_name,
            gpu_count: h.gpu_count,
            gpu_memory_mib: h.gpu_memory_mib,
            topology: h.topology,
            nodes: h.nodes,
            host_cpu: h.host_cpu,
            fingerprint: String::new(),
        }
        .with_fingerprint()
    }
}

impl Hardware {
    /// This hardware with its fingerprint computed from its fields.
    pub fn with_fingerprint(mut self) -> Self {
        self.fingerprint = self.compute_fingerprint();
        self
    }

    /// FNV-1a 64 over the fields that identify the machine. The host CPU counts only where it
    /// is what was measured (no GPU: the CPU backend; the mock backend reports a simulated GPU);
    /// on GPU runners it would split one GPU fleet by the host's CPU stepping.
    pub fn compute_fingerprint(&self) -> String {
        let text = format!(
            "v2|{}|{}|{}|{}|{}|{}",
            self.gpu_name.as_deref().unwrap_or(""),
            self.gpu_count,
            self.gpu_memory_mib.map(|m| m.to_string()).unwrap_or_default(),
            self.topology.as_deref().unwrap_or(""),
            self.nodes,
            if self.gpu_count == 0 { self.host_cpu.as_deref().unwrap_or("") } else { "" }
        );
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.bytes() {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{hash:016x}")
    }

    /// The kind of machine, as nccl-tests and the benchmark both see it: the GPU model, how many,
    /// on how many nodes (the benchmark's memory and topology, which nccl-tests does not report,
    /// left out), so that a benchmark run can be held against the ceiling of a sweep.
    pub fn class(&self) -> String {
        format!("{}|{}|{}", self.gpu_name.as_deref().unwrap_or(""), self.gpu_count, self.nodes)
    }

    /// The first field in which two machines differ, as `(field, self, other)`, for messages.
    pub fn difference(&self, other: &Hardware) -> Option<(&'static str, String, String)> {
        let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "unknown".to_string());
        let mib = |m: Option<u64>| m.map_or_else(|| "unknown".to_string(), |m| format!("{m} MiB"));
        let pairs: [(&'static str, String, String); 6] = [
            ("GPU", opt(&self.gpu_name), opt(&other.gpu_name)),
            ("GPU count", self.gpu_count.to_string(), other.gpu_count.to_string()),
            ("GPU memory", mib(self.gpu_memory_mib), mib(other.gpu_memory_mib)),
            ("topology", opt(&self.topology), opt(&other.topology)),
            ("nodes", self.nodes.to_string(), other.nodes.to_string()),
            ("host CPU", opt(&self.host_cpu), opt(&other.host_cpu)),
        ];
        pairs.into_iter().find(|(_, a, b)| a != b)
    }
}

/// The software a run measured with. A change here is judged like any other change, and named
/// in the report ("NCCL 2.21.5 → 2.23.4").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Software {
    #[serde(default)]
    pub driver: Option<String>,
    #[serde(default)]
    pub cuda: Option<String>,
    #[serde(default)]
    pub nccl: Option<String>,
    /// The commgate version that measured.
    #[serde(default)]
    pub commgate: String,
    /// Every `NCCL_*` variable of the environment the run saw (bounded: see
    /// `bench::assemble::nccl_environment`).
    #[serde(default)]
    pub nccl_env: BTreeMap<String, String>,
    /// What NCCL chose for the benchmark's collective in this run, `ALGO/PROTO` (e.g.
    /// `Ring/LL128`): read from NCCL's tuning output, or the `NCCL_ALGO`/`NCCL_PROTO` the run was
    /// given. NCCL picks per run, and runs fall into modes by it, so the gate compares like with
    /// like (gate.md, "Run-level modes"). Not a software change: a per-run outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_choice: Option<String>,
    /// The run's environment was not recorded (nccl-tests' text table prints none): its
    /// `NCCL_*` variables are unknown, not unset, and no change in them is claimed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nccl_env_unrecorded: bool,
}

/// One difference between two runs' software.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoftwareChange {
    /// `driver`, `CUDA`, `NCCL`, `commgate` or an `NCCL_*` variable name.
    pub component: String,
    /// `None`: unknown or unset.
    pub before: Option<String>,
    pub after: Option<String>,
}

impl std::fmt::Display for SoftwareChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = |o: &Option<String>| o.clone().unwrap_or_else(|| "unset".to_string());
        write!(f, "{} {} → {}", self.component, v(&self.before), v(&self.after))
    }
}

impl Software {
    /// What changed from `self` (the baseline's) to `new`, in a fixed order: driver, CUDA,
    /// NCCL, commgate, then `NCCL_*` variables by name.
    pub fn changes_to(&self, new: &Software) -> Vec<SoftwareChange> {
        let mut out = Vec::new();
        let mut push = |component: &str, before: Option<String>, after: Option<String>| {
            if before != after {
                out.push(SoftwareChange { component: component.to_string(), before, after });
            }
        };
        push("driver", self.driver.clone(), new.driver.clone());
        push("CUDA", self.cuda.clone(), new.cuda.clone());
        push("NCCL", self.nccl.clone(), new.nccl.clone());
        let known = |s: &str| (!s.is_empty()).then(|| s.to_string());
        push("commgate", known(&self.commgate), known(&new.commgate));
        if self.nccl_env_unrecorded || new.nccl_env_unrecorded {
            return out;
        }
        let names: std::collections::BTreeSet<&String> = self.nccl_env.keys().chain(new.nccl_env.keys()).collect();
        for name in names {
            push(name, self.nccl_env.get(name).cloned(), new.nccl_env.get(name).cloned());
        }
        out
    }
}

/// Where and from what a run was measured, for the store's history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The commit measured (`GITHUB_SHA` in Actions).
    #[serde(default)]
    pub commit: Option<String>,
    /// The Git ref (`GITHUB_REF`).
    #[serde(default, rename = "ref")]
    pub git_ref: Option<String>,
    /// The runner (`RUNNER_NAME`, else the host name).
    #[serde(default)]
    pub runner: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_changes_are_listed_in_order() {
        let before = Software {
            nccl: Some("2.21.5".into()),
            commgate: "0.1.0".into(),
            nccl_env: BTreeMap::from([("NCCL_PROTO".into(), "LL".into())]),
            ..Software::default()
        };
        let after = Software {
            nccl: Some("2.23.4".into()),
            commgate: "0.1.0".into(),
            nccl_env: BTreeMap::from([("NCCL_ALGO".into(), "Ring".into())]),
            ..Software::default()
        };
        let listed: Vec<String> = before.changes_to(&after).iter().map(ToString::to_string).collect();
        assert_eq!(listed, ["NCCL 2.21.5 → 2.23.4", "NCCL_ALGO unset → Ring", "NCCL_PROTO LL → unset"]);
        assert!(before.changes_to(&before).is_empty());
        // An environment that was not recorded (nccl-tests' text table) claims no change in it.
        let unknown = Software { nccl_env_unrecorded: true, nccl_env: BTreeMap::new(), ..after.clone() };
        let listed: Vec<String> = before.changes_to(&unknown).iter().map(ToString::to_string).collect();
        assert_eq!(listed, ["NCCL 2.21.5 → 2.23.4"]);
    }
}
