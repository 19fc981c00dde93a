//! Upgrades older file versions in memory as they are read, so stores committed by an earlier
//! commgate keep working. Only the JSON shape changes; nothing is re-measured or guessed.
//!
//! Version 1 → 2: `hardware.driver`, `hardware.cuda` and `hardware.nccl` move into a new
//! `software` block (with `commgate` taken from `tool.version`); `hardware.fingerprint` is
//! recomputed from the hardware fields alone when the typed value is built. Applies to a result
//! file, to every run of a baseline store (`runs[]`) and to a check report's `bench`.

use serde_json::{Map, Value};

/// Upgrades a version-1 document of any kind (result, store, check report) to version 2.
pub fn upgrade_v1(doc: &mut Value) {
    let Some(obj) = doc.as_object_mut() else { return };
    if obj.contains_key("hardware") {
        upgrade_run(obj);
    }
    if let Some(runs) = obj.get_mut("runs").and_then(Value::as_array_mut) {
        for run in runs.iter_mut().filter_map(Value::as_object_mut) {
            upgrade_run(run);
        }
    }
    if let Some(bench) = obj.get_mut("bench").and_then(Value::as_object_mut) {
        upgrade_run(bench);
    }
    obj.insert("schema_version".into(), super::SCHEMA_VERSION.into());
}

/// One run: software fields out of `hardware` into `software`.
fn upgrade_run(run: &mut Map<String, Value>) {
    let commgate = run.get("tool").and_then(|t| t.get("version")).cloned().unwrap_or_else(|| Value::from(""));
    let mut software = Map::new();
    if let Some(hw) = run.get_mut("hardware").and_then(Value::as_object_mut) {
        for key in ["driver", "cuda", "nccl"] {
            software.insert(key.into(), hw.remove(key).unwrap_or(Value::Null));
        }
    }
    software.insert("commgate".into(), commgate);
    software.insert("nccl_env".into(), Value::Object(Map::new()));
    run.entry("software").or_insert(Value::Object(software));
    run.insert("schema_version".into(), super::SCHEMA_VERSION.into());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v1_run() -> Value {
        json!({
            "schema_version": 1,
            "tool": {"name": "commgate", "version": "0.1.0"},
            "hardware": {"gpu_name": "H200", "gpu_count": 8, "driver": "580.95.05", "cuda": "12.8",
                         "nccl": "2.21.5", "host_cpu": "Xeon", "fingerprint": "0123456789abcdef"}
        })
    }

    #[test]
    fn a_v1_run_gets_a_software_block() {
        let mut doc = v1_run();
        upgrade_v1(&mut doc);
        assert_eq!(doc["schema_version"], 2);
        assert_eq!(
            doc["software"],
            json!({"driver": "580.95.05", "cuda": "12.8", "nccl": "2.21.5",
                                           "commgate": "0.1.0", "nccl_env": {}})
        );
        assert!(doc["hardware"].get("nccl").is_none());
        assert_eq!(doc["hardware"]["gpu_name"], "H200");
    }

    #[test]
    fn stores_and_reports_upgrade_every_run() {
        let mut store = json!({"schema_version": 1, "runs": [v1_run(), v1_run()]});
        upgrade_v1(&mut store);
        assert_eq!(store["schema_version"], 2);
        for run in store["runs"].as_array().expect("runs") {
            assert_eq!(run["software"]["nccl"], "2.21.5");
            assert_eq!(run["schema_version"], 2);
        }
        let mut report = json!({"schema_version": 1, "bench": v1_run(), "comparison": {"schema_version": 1}});
        upgrade_v1(&mut report);
        assert_eq!(report["bench"]["software"]["cuda"], "12.8");
        assert_eq!(report["comparison"]["schema_version"], 1, "the comparison's own version is not the file's");
        let mut odd = json!([1, 2]);
        upgrade_v1(&mut odd);
        assert_eq!(odd, json!([1, 2]), "not an object: left for the typed reader to refuse");
    }
}
