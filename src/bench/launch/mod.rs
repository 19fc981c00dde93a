//! Multi-process launch: the launcher's environment ([`from_env`] → [`Launch`], in `env`) and a
//! small TCP rendezvous ([`Rendezvous`], in `rendezvous`) that bootstraps a job of one process
//! per rank and carries its few collective calls. Callers use the re-exports below.

mod env;
mod rendezvous;

pub use self::env::{from_env, node_count, Launch, LaunchError, DEFAULT_MASTER_PORT};
pub use self::rendezvous::Rendezvous;
