//! The launcher's environment: which of torchrun, Open MPI's `mpirun` or Slurm's `srun` started
//! this process, and the rank, world size, local rank and master address it was given
//! ([`from_env`] → [`Launch`]), with the rendezvous's secret and the address rank 0 listens on
//! (`COMMGATE_RENDEZVOUS_BIND`). Reads variables only; forming the job is the rendezvous's work.

use std::net::IpAddr;

use super::secret::Secret;

/// Set to an IP address to make rank 0 listen there instead of on `MASTER_ADDR` (`0.0.0.0` or
/// `::` for every interface).
pub const BIND_VAR: &str = commgate_core::environment::RENDEZVOUS_BIND.name;

/// The port torchrun uses when `--master-port` is not given; also ours when a launcher sets
/// `MASTER_ADDR` but no `MASTER_PORT` (Slurm and Open MPI have no port variable of their own).
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// This process's place in a multi-process job, as the launcher described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// Global rank, `0..world_size`.
    pub rank: u32,
    /// Ranks in the job, all nodes together; at least 2 (a world of 1 is no launch).
    pub world_size: u32,
    /// Rank on this node: which GPU this process drives.
    pub local_rank: u32,
    /// Where rank 0 listens (host name or IP address).
    pub master_addr: String,
    pub master_port: u16,
    /// Authenticates the ranks to each other.
    pub secret: Secret,
    /// Where rank 0 listens.
    pub bind: Bind,
}

/// Where rank 0 listens for its peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    /// On the address(es) `MASTER_ADDR` resolves to: only the interface the peers were told.
    MasterAddr,
    /// On this address, from `COMMGATE_RENDEZVOUS_BIND` (the unspecified address: every interface).
    Address(IpAddr),
}

impl Launch {
    /// A launch with the secret derived from the master address, port and world size alone (as
    /// `from_env` derives it without a launcher's job id) and rank 0 listening on `master_addr`:
    /// for callers that start ranks themselves, such as tests.
    pub fn new(rank: u32, world_size: u32, local_rank: u32, master_addr: &str, master_port: u16) -> Launch {
        Launch {
            rank,
            world_size,
            local_rank,
            master_addr: master_addr.to_string(),
            master_port,
            secret: Secret::derived("", world_size, master_addr, master_port, |_| None),
            bind: Bind::MasterAddr,
        }
    }

    /// `host:port` (IPv6 literals bracketed), for messages.
    pub fn master(&self) -> String {
        if self.master_addr.contains(':') && !self.master_addr.starts_with('[') {
            format!("[{}]:{}", self.master_addr, self.master_port)
        } else {
            format!("{}:{}", self.master_addr, self.master_port)
        }
    }
}

/// One launcher's names for rank, world size and local rank.
struct Family {
    launcher: &'static str,
    rank: &'static str,
    world_size: &'static str,
    local_rank: &'static str,
}

/// In order of precedence. torchrun first: srun wrappers and torchrun-under-Slurm set both its
/// variables and Slurm's, and torchrun's are the per-process truth. Open MPI before Slurm: under
/// a Slurm allocation `mpirun` starts its daemons with srun, so its ranks inherit the daemon's
/// `SLURM_PROCID` (a node index), while the `OMPI_COMM_WORLD_*` variables are the rank's own.
const FAMILIES: [Family; 3] = [
    Family { launcher: "torchrun", rank: "RANK", world_size: "WORLD_SIZE", local_rank: "LOCAL_RANK" },
    Family {
        launcher: "mpirun",
        rank: "OMPI_COMM_WORLD_RANK",
        world_size: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
    },
    Family { launcher: "srun", rank: "SLURM_PROCID", world_size: "SLURM_NTASKS", local_rank: "SLURM_LOCALID" },
];

/// What is wrong with the launcher's environment: one line naming the variable. `name`s are the
/// variables as the launcher spells them (`RANK`, `SLURM_NTASKS`, …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// No secret an outsider cannot compute, for ranks on several hosts (the message says what
    /// to set).
    #[error("{0}")]
    Secret(String),
    /// One of the family's variables is missing while the others are set.
    #[error("{name} is not set, but {launcher} variables are: the launcher's environment is incomplete")]
    Missing { name: &'static str, launcher: &'static str },
    #[error("{name}={value:?} is not a non-negative integer")]
    NotANumber { name: &'static str, value: String },
    #[error("{world_size_name}=0: a job needs at least one rank")]
    NoRanks { world_size_name: &'static str },
    #[error("{rank_name}={rank} is not below {world_size_name}={world_size}: ranks run from 0 to {}", .world_size - 1)]
    RankTooHigh { rank_name: &'static str, rank: u32, world_size_name: &'static str, world_size: u32 },
    #[error(
        "{local_rank_name}={local_rank} is not below {world_size_name}={world_size}: a node cannot hold more ranks than the job"
    )]
    LocalRankTooHigh { local_rank_name: &'static str, local_rank: u32, world_size_name: &'static str, world_size: u32 },
    /// More than one rank and no master: guessing `localhost` would hang every multi-node job.
    #[error(
        "MASTER_ADDR is not set but {world_size_name}={world_size}: export rank 0's host name or IP address as MASTER_ADDR"
    )]
    NoMasterAddr { world_size_name: &'static str, world_size: u32 },
    #[error("MASTER_PORT={value:?} is not a TCP port (1-65535)")]
    BadPort { value: String },
    #[error(
        "COMMGATE_RENDEZVOUS_BIND={value:?} is not an IP address: set it to the address rank 0 should listen on \
         (0.0.0.0 or :: for every interface), or unset it to listen on MASTER_ADDR"
    )]
    BadBind { value: String },
}

/// `COMMGATE_RENDEZVOUS_BIND`, read by every rank so a typo stops the job on all of them.
fn bind_from_env(value: Option<String>) -> Result<Bind, LaunchError> {
    let Some(value) = value else { return Ok(Bind::MasterAddr) };
    value
        .trim_matches(|c| c == '[' || c == ']')
        .parse::<IpAddr>()
        .map(Bind::Address)
        .map_err(|_| LaunchError::BadBind { value })
}

/// Reads the launcher's environment through `var` (pass `|k| std::env::var(k).ok()`; tests pass a
/// map). Recognises torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`), Open MPI
/// (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`, `OMPI_COMM_WORLD_LOCAL_RANK`) and Slurm
/// (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`), in that order of precedence (the comment
/// on `FAMILIES` says why); the master is always `MASTER_ADDR` / `MASTER_PORT`, which torchrun and srun
/// wrappers set and mpirun users export. `MASTER_PORT` defaults to 29500, torchrun's own default;
/// `MASTER_ADDR` has no default when the world has more than one rank, since guessing
/// `localhost` would hang every multi-node job.
///
/// The rendezvous's secret is `COMMGATE_RENDEZVOUS_SECRET`, or derived from per-job variables
/// (see [`Secret::from_env`]); `COMMGATE_RENDEZVOUS_BIND` moves rank 0's listener off
/// `MASTER_ADDR`.
///
/// Empty variables count as unset. `Ok(None)`: no launcher variables, or a world of one rank.
/// `Err`: one line naming the variable and what is wrong with it.
///
/// Slurm caveat: a batch script run with `--ntasks=N` but not through `srun` sees
/// `SLURM_PROCID=0` and `SLURM_NTASKS=N` too; it then stops at the missing `MASTER_ADDR`, or waits
/// for peers that never come until the rendezvous timeout. Start one process per rank with `srun`.
pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>, LaunchError> {
    let get = |name: &str| var(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let Some(family) = FAMILIES.iter().find(|f| get(f.rank).is_some() || get(f.world_size).is_some()) else {
        return Ok(None);
    };
    let number = |name: &'static str| -> Result<u32, LaunchError> {
        let value = get(name).ok_or(LaunchError::Missing { name, launcher: family.launcher })?;
        value.parse::<u32>().map_err(|_| LaunchError::NotANumber { name, value })
    };
    let world_size = number(family.world_size)?;
    let rank = number(family.rank)?;
    if world_size == 0 {
        return Err(LaunchError::NoRanks { world_size_name: family.world_size });
    }
    if rank >= world_size {
        return Err(LaunchError::RankTooHigh {
            rank_name: family.rank,
            rank,
            world_size_name: family.world_size,
            world_size,
        });
    }
    if world_size == 1 {
        return Ok(None);
    }
    // Some srun wrappers set RANK and WORLD_SIZE but leave the local rank to Slurm or Open MPI.
    let local_name = [family.local_rank, "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"]
        .into_iter()
        .find(|name| get(name).is_some())
        .unwrap_or(family.local_rank);
    let local_rank = number(local_name)?;
    if local_rank >= world_size {
        return Err(LaunchError::LocalRankTooHigh {
            local_rank_name: local_name,
            local_rank,
            world_size_name: family.world_size,
            world_size,
        });
    }
    let master_addr =
        get("MASTER_ADDR").ok_or(LaunchError::NoMasterAddr { world_size_name: family.world_size, world_size })?;
    let master_port = match get("MASTER_PORT") {
        None => DEFAULT_MASTER_PORT,
        Some(value) => match value.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(LaunchError::BadPort { value }),
        },
    };
    let bind = bind_from_env(get(BIND_VAR))?;
    let secret =
        Secret::from_env(family.launcher, world_size, &master_addr, master_port, &var).map_err(LaunchError::Secret)?;
    Ok(Some(Launch { rank, world_size, local_rank, master_addr, master_port, secret, bind }))
}

/// Nodes a job spans: `SLURM_JOB_NUM_NODES`/`SLURM_NNODES` where Slurm says, else the world
/// size over the ranks per node (`LOCAL_WORLD_SIZE` from torchrun, `OMPI_COMM_WORLD_LOCAL_SIZE`
/// from Open MPI), rounded up; 1 when nothing says.
pub fn node_count(world_size: u32, var: impl Fn(&str) -> Option<String>) -> u32 {
    let number = |name: &str| var(name).and_then(|v| v.trim().parse::<u32>().ok()).filter(|n| *n > 0);
    if let Some(n) = number("SLURM_JOB_NUM_NODES").or_else(|| number("SLURM_NNODES")) {
        return n;
    }
    match number("LOCAL_WORLD_SIZE").or_else(|| number("OMPI_COMM_WORLD_LOCAL_SIZE")) {
        Some(per_node) => world_size.div_ceil(per_node).max(1),
        None => 1,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |key| map.get(key).cloned()
    }

    #[test]
    fn from_env_reads_torchrun() {
        let vars = env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "1234"),
            // A private run id: across hosts, the secret is derived only from what outsiders
            // cannot know.
            ("TORCHELASTIC_RUN_ID", "f3b1c2d4e5"),
            // torchrun under Slurm: its own variables win.
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
        ]);
        let got = from_env(vars).unwrap();
        let got = got.unwrap();
        assert_eq!(got, Launch { secret: got.secret.clone(), ..Launch::new(3, 4, 1, "node0", 1234) });
        assert_eq!(got.bind, Bind::MasterAddr);
        assert!(got.secret.source().contains("MASTER_ADDR"), "{:?}", got.secret);
    }

    #[test]
    fn from_env_reads_slurm_with_the_default_port() {
        let vars = env(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("COMMGATE_RENDEZVOUS_SECRET", "s"),
        ]);
        let got = from_env(vars).unwrap().unwrap();
        assert_eq!((got.rank, got.world_size, got.local_rank), (5, 8, 1));
        assert_eq!(got.master_port, DEFAULT_MASTER_PORT);
        assert_eq!(got.master(), "10.0.0.1:29500");
    }

    #[test]
    fn from_env_prefers_open_mpi_over_the_slurm_daemon_variables() {
        let vars = env(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("MASTER_ADDR", "::1"),
            ("MASTER_PORT", "40000"),
        ]);
        let got = from_env(vars).unwrap().unwrap();
        assert_eq!((got.rank, got.world_size, got.local_rank), (2, 4, 0));
        assert_eq!(got.master(), "[::1]:40000");
    }

    #[test]
    fn from_env_is_none_without_a_launcher_or_with_one_rank() {
        assert_eq!(from_env(env(&[])), Ok(None));
        assert_eq!(from_env(env(&[("PATH", "/bin"), ("RANK", "")])), Ok(None));
        assert_eq!(from_env(env(&[("RANK", "0"), ("WORLD_SIZE", "1")])), Ok(None));
        assert_eq!(from_env(env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")])), Ok(None));
    }

    #[test]
    fn from_env_names_the_variable_that_is_wrong() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("RANK", "4"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "a")], "RANK=4"),
            (&[("RANK", "one"), ("WORLD_SIZE", "4")], "RANK=\"one\""),
            (&[("RANK", "0"), ("WORLD_SIZE", "0")], "WORLD_SIZE=0"),
            (&[("RANK", "1")], "WORLD_SIZE is not set"),
            (&[("WORLD_SIZE", "2")], "RANK is not set"),
            (&[("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")], "MASTER_ADDR is not set"),
            (&[("RANK", "1"), ("WORLD_SIZE", "2")], "LOCAL_RANK is not set"),
            (&[("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "-1"), ("MASTER_ADDR", "a")], "LOCAL_RANK=\"-1\""),
            (
                &[
                    ("RANK", "1"),
                    ("WORLD_SIZE", "2"),
                    ("LOCAL_RANK", "0"),
                    ("MASTER_ADDR", "a"),
                    ("MASTER_PORT", "70000"),
                ],
                "MASTER_PORT=\"70000\"",
            ),
            (
                &[
                    ("RANK", "1"),
                    ("WORLD_SIZE", "2"),
                    ("LOCAL_RANK", "0"),
                    ("MASTER_ADDR", "a"),
                    ("COMMGATE_RENDEZVOUS_BIND", "eth0"),
                ],
                "COMMGATE_RENDEZVOUS_BIND=\"eth0\"",
            ),
            (&[("SLURM_PROCID", "2"), ("SLURM_NTASKS", "2")], "SLURM_PROCID=2"),
            (&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "x")], "OMPI_COMM_WORLD_SIZE"),
        ];
        for (pairs, needle) in cases {
            let error = from_env(env(pairs)).expect_err(needle).to_string();
            assert!(error.contains(needle), "{error:?} should name {needle:?}");
            assert!(!error.contains('\n'), "one line: {error:?}");
        }
    }

    #[test]
    fn the_bind_address_and_secret_come_from_the_environment() {
        let base = [("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1"), ("MASTER_ADDR", "127.0.0.1")];
        let with = |extra: &[(&str, &str)]| {
            let pairs: Vec<(&str, &str)> = base.iter().chain(extra).copied().collect();
            from_env(env(&pairs)).unwrap().unwrap()
        };
        assert_eq!(with(&[]).bind, Bind::MasterAddr);
        assert_eq!(with(&[("COMMGATE_RENDEZVOUS_BIND", "0.0.0.0")]).bind, Bind::Address("0.0.0.0".parse().unwrap()));
        assert_eq!(with(&[("COMMGATE_RENDEZVOUS_BIND", "[::]")]).bind, Bind::Address("::".parse().unwrap()));
        assert_eq!(with(&[("COMMGATE_RENDEZVOUS_SECRET", "s")]).secret.source(), "COMMGATE_RENDEZVOUS_SECRET");
        let run = |id: &str| with(&[("TORCHELASTIC_RUN_ID", id)]).secret;
        assert_eq!(run("a"), run("a"));
        assert_ne!(run("a"), run("b"));
    }

    #[test]
    fn nodes_come_from_the_launcher() {
        assert_eq!(node_count(16, |_| None), 1);
        assert_eq!(node_count(16, env(&[("LOCAL_WORLD_SIZE", "8")])), 2);
        assert_eq!(node_count(12, env(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "8")])), 2);
        assert_eq!(node_count(16, env(&[("SLURM_NNODES", "4"), ("LOCAL_WORLD_SIZE", "8")])), 4);
        assert_eq!(node_count(16, env(&[("LOCAL_WORLD_SIZE", "0")])), 1);
    }
}
