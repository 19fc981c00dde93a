//! The job's rendezvous secret ([`Secret`]): where it comes from (`COMMGATE_RENDEZVOUS_SECRET`,
//! or values the launcher gives every rank of one job) and the HMAC-SHA256 proofs the rendezvous
//! exchanges with it. The key never leaves this module: `Debug` names the source, not the bytes.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The variable a user sets once per job, the same on every rank, to authenticate the ranks.
pub const SECRET_VAR: &str = commgate_core::environment::RENDEZVOUS_SECRET.name;

/// Bytes of a nonce, and of a proof (an HMAC-SHA256 tag).
pub const NONCE_LEN: usize = 32;
pub const PROOF_LEN: usize = 32;

/// Per-job values each launcher gives every rank of the same job, by launcher (as `from_env`
/// names them). Only variables that are the same on every rank of one job and differ between
/// jobs: `SLURM_STEP_ID` is not used under `mpirun`, whose ranks on the first node inherit the
/// batch step while the others run in the daemons' step.
fn job_variables(launcher: &str) -> &'static [&'static str] {
    match launcher {
        "torchrun" => &["TORCHELASTIC_RUN_ID"],
        "mpirun" => &["OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"],
        "srun" => &["SLURM_JOB_ID", "SLURM_STEP_ID"],
        _ => &[],
    }
}

/// The HMAC key every rank of a job shares, and the job's identity, which every proof covers.
/// Two ranks with different secrets, or of different jobs, cannot form a job.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    key: [u8; 32],
    /// The launcher, its per-job variables, the master address and port and the world size:
    /// bound into every proof, so that two jobs sharing a secret never merge.
    job: [u8; 32],
    /// `COMMGATE_RENDEZVOUS_SECRET`, or the variables the key was derived from: for messages.
    source: String,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(from {})", self.source)
    }
}

/// Domain-separated SHA-256 over length-prefixed parts, so no two inputs hash alike.
fn hash(label: &str, parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(label.as_bytes());
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// What a proof covers: which side proves (`hello` or `welcome`), both nonces, the peer's rank
/// and the world size, so no proof can be replayed on another connection, rank or job shape.
fn proof_input(
    side: &str,
    job: &[u8; 32],
    challenge: &[u8; NONCE_LEN],
    peer_nonce: &[u8; NONCE_LEN],
    rank: u32,
    world_size: u32,
) -> Vec<u8> {
    let mut input = format!("commgate rendezvous {side} v3\0").into_bytes();
    input.extend_from_slice(job);
    input.extend_from_slice(challenge);
    input.extend_from_slice(peer_nonce);
    input.extend_from_slice(&rank.to_le_bytes());
    input.extend_from_slice(&world_size.to_le_bytes());
    input
}

impl Secret {
    /// The secret for a job `launcher` started with `world_size` ranks and rank 0 at
    /// `master_addr:master_port`: `COMMGATE_RENDEZVOUS_SECRET` when set (not empty); else derived
    /// from values an outsider cannot know (torchrun's run id, when it is not torchrun's default
    /// `none`); else, only when every rank is on this host (a loopback `MASTER_ADDR`), derived
    /// from the launcher's per-job variables, the master address, port and world size. Across
    /// hosts those can be computed by anyone who sees the job's command line, so that is an
    /// error saying what to set. Every proof also covers the job's identity (`Secret::job`).
    pub fn from_env(
        launcher: &str,
        world_size: u32,
        master_addr: &str,
        master_port: u16,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Secret, String> {
        let derived = Secret::derived(launcher, world_size, master_addr, master_port, &var);
        if let Some(set) = var(SECRET_VAR).filter(|v| !v.is_empty()) {
            return Ok(Secret {
                key: hash("commgate rendezvous secret v2\0", &[set.as_bytes()]),
                job: derived.job,
                source: SECRET_VAR.to_string(),
            });
        }
        let run_id = var("TORCHELASTIC_RUN_ID").map(|v| v.trim().to_string());
        let private_run_id = launcher == "torchrun" && run_id.is_some_and(|id| !id.is_empty() && id != "none");
        if private_run_id || is_loopback(master_addr) {
            return Ok(derived);
        }
        Err(format!(
            "{SECRET_VAR} is not set and the ranks span hosts (MASTER_ADDR={master_addr}): a secret derived from \
             {} can be computed by anyone who sees the job's command line, who could then join it; set \
             {SECRET_VAR} to the same random value on every rank (`export {SECRET_VAR}=$(openssl rand -hex 32)` \
             before launching), or give torchrun a private --rdzv-id",
            derived.source.trim_start_matches(&format!("{SECRET_VAR} unset, derived from "))
        ))
    }

    /// The secret derived from the job's shared values, whether or not an outsider could know
    /// them: what [`Secret::from_env`] uses on one host, and what tests that start ranks
    /// themselves use.
    pub(crate) fn derived(
        launcher: &str,
        world_size: u32,
        master_addr: &str,
        master_port: u16,
        var: impl Fn(&str) -> Option<String>,
    ) -> Secret {
        let mut used = Vec::new();
        let mut parts: Vec<Vec<u8>> = vec![launcher.as_bytes().to_vec()];
        for name in job_variables(launcher) {
            if let Some(value) = var(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty()) {
                used.push(*name);
                parts.push(format!("{name}={value}").into_bytes());
            }
        }
        parts.push(format!("MASTER_ADDR={master_addr}").into_bytes());
        parts.push(format!("MASTER_PORT={master_port}").into_bytes());
        parts.push(format!("world_size={world_size}").into_bytes());
        used.extend(["MASTER_ADDR", "MASTER_PORT", "the world size"]);
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        Secret {
            key: hash("commgate rendezvous derived secret v2\0", &refs),
            job: hash("commgate rendezvous job v1\0", &refs),
            source: format!("{SECRET_VAR} unset, derived from {}", used.join(", ")),
        }
    }

    /// Where the secret came from, for messages (never the secret itself).
    pub fn source(&self) -> &str {
        &self.source
    }

    fn mac(&self, input: &[u8]) -> Hmac<Sha256> {
        // HMAC takes a key of any length: this cannot fail for 32 bytes.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!());
        mac.update(input);
        mac
    }

    /// The proof for `label` (`hello` or `welcome`) over one exchange's nonces and the rank.
    fn proof(
        &self,
        label: &str,
        challenge: &[u8; NONCE_LEN],
        peer_nonce: &[u8; NONCE_LEN],
        rank: u32,
        world_size: u32,
    ) -> [u8; PROOF_LEN] {
        self.mac(&proof_input(label, &self.job, challenge, peer_nonce, rank, world_size)).finalize().into_bytes().into()
    }

    /// Checks `proof` against [`Self::proof`]'s, in constant time.
    fn verify(
        &self,
        label: &str,
        challenge: &[u8; NONCE_LEN],
        peer_nonce: &[u8; NONCE_LEN],
        rank: u32,
        world_size: u32,
        proof: &[u8],
    ) -> bool {
        self.mac(&proof_input(label, &self.job, challenge, peer_nonce, rank, world_size)).verify_slice(proof).is_ok()
    }

    /// A peer's proof, in its hello: HMAC(key, "hello" ‖ challenge ‖ peer nonce ‖ rank ‖ world size).
    pub(crate) fn hello_proof(
        &self,
        challenge: &[u8; NONCE_LEN],
        peer_nonce: &[u8; NONCE_LEN],
        rank: u32,
        world_size: u32,
    ) -> [u8; PROOF_LEN] {
        self.proof("hello", challenge, peer_nonce, rank, world_size)
    }

    /// Rank 0's check of a hello's proof, in constant time.
    pub(crate) fn verify_hello(
        &self,
        challenge: &[u8; NONCE_LEN],
        peer_nonce: &[u8; NONCE_LEN],
        rank: u32,
        world_size: u32,
        proof: &[u8],
    ) -> bool {
        self.verify("hello", challenge, peer_nonce, rank, world_size, proof)
    }

    /// Rank 0's proof, in its welcome: the same inputs under the label "welcome", so a peer knows
    /// it reached rank 0 of its own job (and takes NCCL's id from it).
    pub(crate) fn welcome_proof(
        &self,
        challenge: &[u8; NONCE_LEN],
        peer_nonce: &[u8; NONCE_LEN],
        rank: u32,
        world_size: u32,
    ) -> [u8; PROOF_LEN] {
        self.proof("welcome", challenge, peer_nonce, rank, world_size)
    }

    /// A peer's check of a welcome's proof, in constant time.
    pub(crate) fn verify_welcome(
        &self,
        challenge: &[u8; NONCE_LEN],
        peer_nonce: &[u8; NONCE_LEN],
        rank: u32,
        world_size: u32,
        proof: &[u8],
    ) -> bool {
        self.verify("welcome", challenge, peer_nonce, rank, world_size, proof)
    }
}

/// Whether `addr` can only be reached from this host: `localhost`, `127.0.0.0/8`, `::1`.
fn is_loopback(addr: &str) -> bool {
    let addr = addr.trim().trim_start_matches('[').trim_end_matches(']');
    addr.eq_ignore_ascii_case("localhost") || addr.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A fresh nonce from the operating system's random source.
pub(crate) fn nonce() -> Result<[u8; NONCE_LEN], String> {
    let mut bytes = [0u8; NONCE_LEN];
    getrandom::fill(&mut bytes).map_err(|e| format!("the operating system gave no random bytes ({e})"))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |key| map.get(key).cloned()
    }

    /// The secret as ranks on several hosts would derive it (the check of guessable values aside).
    fn secret(pairs: &[(&str, &str)]) -> Secret {
        Secret::from_env("srun", 4, "node0", 29500, env(pairs))
            .unwrap_or_else(|_| Secret::derived("srun", 4, "node0", 29500, env(pairs)))
    }

    /// Across hosts, only a secret an outsider cannot compute is used: the variable, or
    /// torchrun's own run id; on one host the job's shared values do.
    #[test]
    fn guessable_values_across_hosts_are_refused() {
        let e = Secret::from_env("srun", 4, "node0", 29500, env(&[("SLURM_JOB_ID", "7")])).unwrap_err();
        assert!(e.contains("COMMGATE_RENDEZVOUS_SECRET is not set") && e.contains("openssl rand"), "{e}");
        assert!(e.contains("SLURM_JOB_ID"), "{e}");
        let none = env(&[("TORCHELASTIC_RUN_ID", "none")]);
        assert!(Secret::from_env("torchrun", 4, "node0", 29500, none).is_err(), "torchrun's default run id");
        let private = env(&[("TORCHELASTIC_RUN_ID", "f3b1c2d4e5")]);
        assert!(Secret::from_env("torchrun", 4, "node0", 29500, private).is_ok());
        assert!(Secret::from_env("srun", 4, "node0", 29500, env(&[(SECRET_VAR, "x")])).is_ok());
        for local in ["127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"] {
            assert!(Secret::from_env("", 4, local, 29500, env(&[])).is_ok(), "{local}");
        }
    }

    /// One secret, two jobs (another port or world size): proofs of one do not pass the other.
    #[test]
    fn the_job_is_bound_into_every_proof() {
        let a = Secret::from_env("srun", 4, "node0", 29500, env(&[(SECRET_VAR, "shared")])).unwrap();
        let b = Secret::from_env("srun", 4, "node0", 29501, env(&[(SECRET_VAR, "shared")])).unwrap();
        let (c, n) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let proof = a.hello_proof(&c, &n, 1, 4);
        assert!(a.verify_hello(&c, &n, 1, 4, &proof));
        assert!(!b.verify_hello(&c, &n, 1, 4, &proof), "another job");
    }

    #[test]
    fn a_set_secret_wins_and_is_never_printed() {
        let set = secret(&[(SECRET_VAR, "hunter2-long-secret"), ("SLURM_JOB_ID", "7")]);
        assert_eq!(set.source(), SECRET_VAR);
        // The same secret in another job (another job id) is another job's: proofs differ.
        assert_ne!(set, secret(&[(SECRET_VAR, "hunter2-long-secret"), ("SLURM_JOB_ID", "8")]));
        assert_eq!(set, secret(&[(SECRET_VAR, "hunter2-long-secret"), ("SLURM_JOB_ID", "7")]));
        assert_ne!(set, secret(&[(SECRET_VAR, "other")]));
        let shown = format!("{set:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert_eq!(shown, "Secret(from COMMGATE_RENDEZVOUS_SECRET)");
        // Empty counts as unset.
        assert_eq!(secret(&[(SECRET_VAR, "")]), secret(&[]));
    }

    #[test]
    fn a_derived_secret_differs_between_jobs_and_says_what_it_used() {
        let job = secret(&[("SLURM_JOB_ID", "7"), ("SLURM_STEP_ID", "0")]);
        assert_eq!(
            job.source(),
            "COMMGATE_RENDEZVOUS_SECRET unset, derived from SLURM_JOB_ID, SLURM_STEP_ID, MASTER_ADDR, MASTER_PORT, the world size"
        );
        assert_eq!(job, secret(&[("SLURM_JOB_ID", "7"), ("SLURM_STEP_ID", "0")]));
        assert_ne!(job, secret(&[("SLURM_JOB_ID", "8"), ("SLURM_STEP_ID", "0")]));
        assert_ne!(job, secret(&[("SLURM_JOB_ID", "7"), ("SLURM_STEP_ID", "1")]));
        assert_ne!(
            job,
            Secret::derived("srun", 4, "node0", 29501, env(&[("SLURM_JOB_ID", "7"), ("SLURM_STEP_ID", "0")]))
        );
        assert_ne!(
            job,
            Secret::derived("srun", 5, "node0", 29500, env(&[("SLURM_JOB_ID", "7"), ("SLURM_STEP_ID", "0")]))
        );
        // Another launcher's variables are not read.
        let torchrun = Secret::derived("torchrun", 4, "node0", 29500, env(&[("SLURM_STEP_ID", "3")]));
        assert_eq!(torchrun, Secret::derived("torchrun", 4, "node0", 29500, env(&[("SLURM_STEP_ID", "4")])));
        assert!(torchrun.source().ends_with("derived from MASTER_ADDR, MASTER_PORT, the world size"));
    }

    #[test]
    fn proofs_bind_nonces_rank_world_size_and_side() {
        let key = secret(&[(SECRET_VAR, "s")]);
        let (c, n) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let proof = key.hello_proof(&c, &n, 1, 4);
        assert!(key.verify_hello(&c, &n, 1, 4, &proof));
        assert!(!key.verify_hello(&c, &n, 2, 4, &proof), "another rank");
        assert!(!key.verify_hello(&c, &n, 1, 5, &proof), "another world size");
        assert!(!key.verify_hello(&[3; NONCE_LEN], &n, 1, 4, &proof), "another challenge");
        assert!(!key.verify_hello(&c, &[3; NONCE_LEN], 1, 4, &proof), "another peer nonce");
        assert!(!key.verify_hello(&c, &n, 1, 4, &proof[..31]), "cut short");
        assert!(!key.verify_welcome(&c, &n, 1, 4, &proof), "a hello is no welcome");
        assert!(!secret(&[(SECRET_VAR, "t")]).verify_hello(&c, &n, 1, 4, &proof), "another secret");
        let welcome = key.welcome_proof(&c, &n, 1, 4);
        assert!(key.verify_welcome(&c, &n, 1, 4, &welcome));
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }
}
