//! How the job's GPUs reach each other, as the driver reports it, summarised as one short stable
//! word for the result's `hardware.topology`; and the first GPU's memory.
//!
//! For every ordered pair of the GPUs this process can see (CUDA ordinals `0..min(visible,
//! world size)`: the job's GPUs on this node when ranks fill a node from ordinal 0),
//! [`query`] asks `cuDeviceCanAccessPeer` and `cuDeviceGetP2PAttribute` (access supported, native
//! atomics, performance rank), and [`summarise`] names the whole:
//!
//! - `single-gpu`: the job has one GPU;
//! - `nvlink`: every pair peer-to-peer with native atomics and one performance rank (NVLink or
//!   NVSwitch: PCIe peer-to-peer has no native atomics);
//! - `pcie-p2p`: every pair peer-to-peer, none with native atomics, one performance rank;
//! - `no-p2p`: no pair peer-to-peer (NCCL goes through host memory or the network);
//! - `mixed`: anything else (some pairs faster than others).
//!
//! The limits: a process sees only its node's GPUs and only those in `CUDA_VISIBLE_DEVICES`. A
//! job of one process per GPU whose launcher gives each process a single visible GPU has no pair
//! to ask about: the topology is then unknown (`None`), not `single-gpu`. Across nodes it
//! describes rank 0's node and says nothing of the network between nodes.

use cudarc::driver::sys::CUdevice_P2PAttribute;
use cudarc::driver::DriverError;

use super::ffi;

/// What the driver says about the link from one GPU to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Link {
    /// `cuDeviceCanAccessPeer` and `CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED` both.
    pub access: bool,
    /// `CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED`.
    pub native_atomics: bool,
    /// `CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK` (lower is faster; relative, per system).
    pub performance_rank: i32,
}

/// The `hardware.topology` word for a job of `job_gpus` GPUs whose visible pairs are `links` (see
/// the module doc); `None` when the job has several GPUs but this process sees no pair of them.
pub(super) fn summarise(job_gpus: u32, links: &[Link]) -> Option<&'static str> {
    if job_gpus <= 1 {
        return Some("single-gpu");
    }
    let first = links.first()?;
    let uniform = links.iter().all(|l| l.performance_rank == first.performance_rank);
    let word = if links.iter().all(|l| !l.access) {
        "no-p2p"
    } else if !links.iter().all(|l| l.access) || !uniform {
        "mixed"
    } else if links.iter().all(|l| l.native_atomics) {
        "nvlink"
    } else if links.iter().all(|l| !l.native_atomics) {
        "pcie-p2p"
    } else {
        "mixed"
    };
    Some(word)
}

/// The CUDA ordinals whose links are asked about: those of the job's GPUs this process can see.
pub(super) fn ordinals(visible: u32, job_gpus: u32) -> std::ops::Range<usize> {
    0..visible.min(job_gpus) as usize
}

/// Every ordered pair's link among `ordinals`. Needs `cuInit` (any open context).
pub(super) fn query(ordinals: std::ops::Range<usize>) -> Result<Vec<Link>, DriverError> {
    let devices = ordinals
        .map(|o| cudarc::driver::result::device::get(i32::try_from(o).unwrap_or(i32::MAX)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut links = Vec::with_capacity(devices.len() * devices.len().saturating_sub(1));
    for (i, &src) in devices.iter().enumerate() {
        for (j, &dst) in devices.iter().enumerate() {
            if i == j {
                continue;
            }
            let attribute = |a| ffi::p2p_attribute(a, src, dst);
            let access = ffi::can_access_peer(src, dst)?
                && attribute(CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED)? != 0;
            let native_atomics =
                attribute(CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED)? != 0;
            let performance_rank = attribute(CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK)?;
            links.push(Link { access, native_atomics, performance_rank });
        }
    }
    Ok(links)
}

/// Bytes to whole MiB, as the result reports GPU memory.
pub(super) fn mib(bytes: usize) -> u64 {
    bytes as u64 / (1024 * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NVLINK: Link = Link { access: true, native_atomics: true, performance_rank: 0 };
    const PCIE: Link = Link { access: true, native_atomics: false, performance_rank: 0 };
    const NONE: Link = Link { access: false, native_atomics: false, performance_rank: 0 };

    #[test]
    fn one_gpu_is_single_gpu_whatever_else_is_visible() {
        assert_eq!(summarise(1, &[]), Some("single-gpu"));
        assert_eq!(summarise(1, &[NVLINK, NVLINK]), Some("single-gpu"));
        assert_eq!(summarise(0, &[]), Some("single-gpu"));
    }

    #[test]
    fn uniform_links_name_their_kind() {
        assert_eq!(summarise(8, &[NVLINK; 56]), Some("nvlink"));
        assert_eq!(summarise(2, &[PCIE; 2]), Some("pcie-p2p"));
        assert_eq!(summarise(4, &[NONE; 12]), Some("no-p2p"));
        // Peer access off but the rank differs: still no peer-to-peer at all.
        assert_eq!(summarise(2, &[NONE, Link { performance_rank: 1, ..NONE }]), Some("no-p2p"));
    }

    #[test]
    fn anything_uneven_is_mixed() {
        assert_eq!(summarise(4, &[NVLINK, NVLINK, PCIE]), Some("mixed"));
        assert_eq!(summarise(4, &[NVLINK, NONE]), Some("mixed"));
        assert_eq!(summarise(4, &[PCIE, NONE]), Some("mixed"));
        assert_eq!(summarise(4, &[NVLINK, Link { performance_rank: 1, ..NVLINK }]), Some("mixed"));
        assert_eq!(summarise(4, &[PCIE, Link { performance_rank: 2, ..PCIE }]), Some("mixed"));
    }

    #[test]
    fn several_gpus_and_no_visible_pair_is_unknown() {
        // One GPU per process through CUDA_VISIBLE_DEVICES: nothing to ask the driver about.
        assert_eq!(summarise(2, &[]), None);
    }

    #[test]
    fn the_pairs_asked_about_are_the_jobs_visible_gpus() {
        assert_eq!(ordinals(8, 2), 0..2);
        assert_eq!(ordinals(8, 16), 0..8);
        assert_eq!(ordinals(1, 4), 0..1);
    }

    #[test]
    fn memory_reads_in_whole_mib() {
        assert_eq!(mib(150_754_820_096), 143_771);
        assert_eq!(mib(1024 * 1024 - 1), 0);
    }
}
