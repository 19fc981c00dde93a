//! Multi-process launch: the launcher's environment ([`from_env`] → [`Launch`], in `env`) and a
//! small TCP rendezvous ([`Rendezvous`], in `rendezvous`) that bootstraps a job of one process
//! per rank and carries its few collective calls, authenticated with the job's secret ([`Secret`],
//! in `secret`). Callers use the re-exports below.

mod env;
mod rendezvous;
mod secret;

pub use self::env::{from_env, node_count, Bind, Launch, LaunchError, BIND_VAR, DEFAULT_MASTER_PORT};
pub use self::rendezvous::Rendezvous;
pub use self::secret::{Secret, SECRET_VAR};
