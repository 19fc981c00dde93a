//! The settings commgate reads only from the environment: no flag, no `commgate.toml` key. They
//! are declared here, once, beside each other, so that the crates that read them name the same
//! variable and the reference table in `docs/formats.md` ("Variables without a flag") is
//! generated from this list; a test fails when a `COMMGATE_*` variable read anywhere is neither a
//! flag's variable (declared with the flag in the command line's sections) nor listed here.
//!
//! Every other setting has a flag, a variable and a file key, declared together with the flag.

/// A variable read only from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvOnly {
    /// The variable, e.g. `COMMGATE_RENDEZVOUS_SECRET`.
    pub name: &'static str,
    /// The commands that read it.
    pub read_by: &'static str,
    /// What it does, one sentence for the reference table.
    pub meaning: &'static str,
}

/// The launcher's rendezvous: the secret every rank proves it holds.
pub const RENDEZVOUS_SECRET: EnvOnly = EnvOnly {
    name: "COMMGATE_RENDEZVOUS_SECRET",
    read_by: "bench, check",
    meaning: "The secret the ranks of a launched job prove to each other at the rendezvous (derived from the \
              launcher's job ids when unset).",
};

/// The launcher's rendezvous: where rank 0 listens.
pub const RENDEZVOUS_BIND: EnvOnly = EnvOnly {
    name: "COMMGATE_RENDEZVOUS_BIND",
    read_by: "bench, check",
    meaning: "The IP address rank 0 listens on for the rendezvous, whatever `MASTER_ADDR` says (`0.0.0.0` or `::` \
              for every interface).",
};

/// The CUDA backend's timing barrier (a stream wait on a host-written flag): on or off.
pub const CUDA_GATE: EnvOnly = EnvOnly {
    name: "COMMGATE_CUDA_GATE",
    read_by: "bench, check",
    meaning:
        "`on` (the default) or `off`: the CUDA timing barrier, which holds every stream until the host has queued \
              the whole step, so that no timing window holds launch time (an empty value counts as unset).",
};

/// Set by commgate itself when it restarts with a private `libnccl.so` link.
pub const NCCL_LINK_DIR: EnvOnly = EnvOnly {
    name: "COMMGATE_NCCL_LINK_DIR",
    read_by: "bench, check",
    meaning: "Set by commgate when it restarts itself with a private `libnccl.so` link; do not set it.",
};

/// Set by commgate itself when it reads NCCL's tuning choice from NCCL's own log.
pub const NCCL_TUNING_LOG: EnvOnly = EnvOnly {
    name: "COMMGATE_NCCL_TUNING_LOG",
    read_by: "bench, check",
    meaning: "Set by commgate, with `NCCL_DEBUG=INFO`, when it reads NCCL's algorithm and protocol from NCCL's \
              log; do not set it.",
};

/// The bot login a token comments as.
pub const COMMENT_AUTHOR: EnvOnly = EnvOnly {
    name: "COMMGATE_COMMENT_AUTHOR",
    read_by: "check, comment",
    meaning: "The bot login the token comments as (e.g. `github-actions[bot]`): only that login's marked comment \
              is the one updated.",
};

/// The mock backend's fault injection, for tests of failing runs.
pub const MOCK_FAULT: EnvOnly = EnvOnly {
    name: "COMMGATE_MOCK_FAULT",
    read_by: "bench, check",
    meaning: "A test hook: `hang` or `die:RANK` makes the mock backend hang or lose a rank.",
};

/// Every variable without a flag, in the order of the reference table.
pub const ENV_ONLY: [EnvOnly; 7] =
    [COMMENT_AUTHOR, CUDA_GATE, MOCK_FAULT, NCCL_LINK_DIR, NCCL_TUNING_LOG, RENDEZVOUS_BIND, RENDEZVOUS_SECRET];

/// Variables never handed to a process commgate starts for a pull request's code (a paired
/// check's `prepare`, `capture` and benchmark arms): the job's files that later steps trust
/// (`GITHUB_ENV`, `GITHUB_OUTPUT`, `GITHUB_PATH`, `GITHUB_STATE`, `GITHUB_STEP_SUMMARY`), the
/// runner's service endpoints, and every name that looks like a credential (it contains
/// `TOKEN`, `SECRET`, `PASSWORD`, `PASSWD`, `CREDENTIAL` or `API_KEY`, or ends in `_KEY`; any
/// case), plus `SSH_AUTH_SOCK`.
pub fn withheld_from_children(name: &str) -> bool {
    const NAMES: [&str; 10] = [
        "GITHUB_ENV",
        "GITHUB_OUTPUT",
        "GITHUB_PATH",
        "GITHUB_STATE",
        "GITHUB_STEP_SUMMARY",
        "ACTIONS_RUNTIME_URL",
        "ACTIONS_ID_TOKEN_REQUEST_URL",
        "ACTIONS_CACHE_URL",
        "ACTIONS_RESULTS_URL",
        "SSH_AUTH_SOCK",
    ];
    const WORDS: [&str; 5] = ["TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"];
    let upper = name.to_ascii_uppercase();
    NAMES.contains(&upper.as_str())
        || WORDS.iter().any(|w| upper.contains(w))
        || upper.contains("API_KEY")
        || upper.ends_with("_KEY")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_the_jobs_files_are_withheld_from_children() {
        for name in [
            "GITHUB_TOKEN",
            "github_token",
            "ACTIONS_RUNTIME_TOKEN",
            "COMMGATE_RENDEZVOUS_SECRET",
            "AWS_SECRET_ACCESS_KEY",
            "WANDB_API_KEY",
            "HF_TOKEN",
            "GITHUB_ENV",
            "GITHUB_STEP_SUMMARY",
            "DB_PASSWORD",
            "SSH_AUTH_SOCK",
            "MY_SIGNING_KEY",
        ] {
            assert!(withheld_from_children(name), "{name}");
        }
        for name in ["PATH", "HOME", "LD_LIBRARY_PATH", "NCCL_DEBUG", "CUDA_VISIBLE_DEVICES", "GITHUB_SHA", "KEYBOARD"]
        {
            assert!(!withheld_from_children(name), "{name}");
        }
    }

    #[test]
    fn names_are_unique_sorted_and_prefixed() {
        let names: Vec<&str> = ENV_ONLY.iter().map(|v| v.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted, "sorted, no duplicate");
        for v in ENV_ONLY {
            assert!(v.name.starts_with("COMMGATE_"), "{}", v.name);
            assert!(v.meaning.ends_with('.') && !v.read_by.is_empty(), "{v:?}");
            assert!(!v.meaning.contains('|') && !v.meaning.contains('\n'), "a table cell: {v:?}");
        }
    }
}
