//! Whether CUDA can run here, asked without letting cudarc panic, and making NCCL loadable.
//!
//! **What it loads at run time.** cudarc is built with `dynamic-loading`, so the binary links only
//! libc and builds on machines without CUDA; on first use cudarc `dlopen`s libcuda (the driver:
//! `libcuda.so`, `libcuda.so.1`), libcublas (`libcublas.so`, `.so.13`, `.so.12`, …; it pulls in
//! libcublasLt itself) and libnccl. A library that is missing makes cudarc *panic*, so [`probe`]
//! asks first with cudarc's `is_culib_present()` and turns each absence into one line saying how
//! to fix it. The bindings are CUDA 13's: event timing calls `cuEventElapsedTime_v2`, which only
//! drivers for CUDA 12.8 or newer export, so [`probe`] also checks the driver's CUDA version.
//!
//! **cuBLAS under site-packages.** cudarc's names for cuBLAS (`libcublas.so.13`, `.so.12`) are
//! the sonames pip's wheels install, but a host whose only CUDA libraries came with torch has
//! `site-packages/nvidia/cublas/lib` on no search path. [`probe`] then finds the library as it
//! finds NCCL (below) and loads it by its path, for good: glibc answers cudarc's later load by
//! soname with that copy, so cuBLAS needs no restart. (commgate uses no CUDA runtime library:
//! cudarc drives the GPU through the driver API.)
//!
//! **NCCL's `.so.2`.** cudarc looks for `libnccl.so`, `libnccl.so.13`, `.so.12`, `.so.11`, … but
//! never `libnccl.so.2`, the only name that pip's `nvidia-nccl-cu13` and the `libnccl2` package
//! install. It opens libraries by bare name, so the dynamic loader searches `LD_LIBRARY_PATH` —
//! and glibc reads that variable once, when the process starts: setting it later changes nothing,
//! and loading the `.so.2` ourselves first does not help either (glibc matches an already-loaded
//! library by the name it was opened with or its soname, `libnccl.so.2`, never `libnccl.so`). So
//! `ensure_nccl_loadable` makes a private directory holding a `libnccl.so` link to the `.so.2`
//! it finds (under `LD_LIBRARY_PATH`, Python's `nvidia/nccl/lib` in the site-packages of the usual
//! prefixes, the usual system directories — listed, never asked of Python, which would run code)
//! and re-executes this program (same pid, same arguments, same environment: it is this program,
//! not another one) with that directory first on
//! `LD_LIBRARY_PATH`; the new process loads NCCL for good and removes the directory. It runs at
//! the very start of `bench` and `check` ([`prepare_at_start`], from `commgate::run`), on the main
//! thread, before anything a re-exec would lose exists (the base commit's temporary copy, the
//! benchmark's thread, the rendezvous sockets); later, [`nccl_loadable`] only reports the fix.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use cudarc::driver::sys::CUresult;
use cudarc::driver::{CudaContext, DriverError};

use super::{cuda_version_string, ffi};
use crate::BenchError;

/// Oldest driver CUDA version the CUDA 13 bindings run on (`cuEventElapsedTime_v2`), as
/// `cuDriverGetVersion` reports it (1000·major + 10·minor).
const MIN_DRIVER_CUDA: i32 = 12080;

/// Set by the re-exec: the private directory holding our `libnccl.so` link.
const LINK_DIR_ENV: &str = commgate_core::environment::NCCL_LINK_DIR.name;
const DIR_PREFIX: &str = "commgate-nccl-";

/// The driver entry points the backend calls (through cudarc) on every run: checked before the
/// first call, since cudarc panics on a missing one.
pub const DRIVER_SYMBOLS: [&str; 33] = [
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDeviceGetName",
    "cuDeviceTotalMem_v2",
    "cuDeviceCanAccessPeer",
    "cuDeviceGetP2PAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime_v2",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemsetD8Async",
    "cuMemcpyHtoDAsync_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostGetDevicePointer_v2",
    "cuDeviceGetDefaultMemPool",
    "cuMemPoolSetAccess",
];

/// The one driver entry point the backend can do without: the timing barrier's stream wait
/// (without it the run is timed ungated, with a note).
pub const BARRIER_SYMBOL: &str = "cuStreamWaitValue32_v2";

/// The cuBLAS entry points the backend calls.
pub const CUBLAS_SYMBOLS: [&str; 5] =
    ["cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSgemm_v2", "cublasGemmEx"];

/// The NCCL entry points the backend calls; `ncclCommFinalize` came with NCCL 2.14.
pub const NCCL_SYMBOLS: [&str; 11] = [
    "ncclGetVersion",
    "ncclGetUniqueId",
    "ncclCommInitAll",
    "ncclCommInitRank",
    "ncclAllReduce",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclCommGetAsyncError",
    "ncclCommAbort",
    "ncclCommFinalize",
    "ncclCommDestroy",
];

/// What this machine lacks to run the CUDA backend, each as one line saying how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum CudaUnavailable {
    #[error("libcuda.so not found: install the NVIDIA driver, or use --backend cpu")]
    NoDriver,
    #[error("no CUDA device visible (CUDA_VISIBLE_DEVICES?): check `nvidia-smi`, or use --backend cpu")]
    NoDevice,
    #[error("the CUDA driver did not start ({0}): check `nvidia-smi`, or use --backend cpu")]
    DriverFailed(DriverError),
    /// The driver's CUDA version (1000·major + 10·minor) is older than the bindings need.
    #[error(
        "the NVIDIA driver supports CUDA {}, commgate's CUDA backend needs 12.8 or newer \
         (driver R570+): update the driver, or use --backend cpu",
        cuda_version_string(*.0)
    )]
    DriverTooOld(i32),
    #[error(
        "libcublas.so.13/.so.12 not found on LD_LIBRARY_PATH, in pip's nvidia/cublas/lib or nvidia/cu13/lib, or in \
         the system's library directories: pip install nvidia-cublas-cu12 (torch's) or install the CUDA toolkit's \
         cuBLAS, or set LD_LIBRARY_PATH"
    )]
    NoCublas,
    /// cuBLAS was found where cudarc does not look, and loading it by its path failed.
    #[error("{} was found but does not load ({error}): check `ldd {}` for a missing dependency", .path.display(), .path.display())]
    CublasDoesNotLoad { path: PathBuf, error: String },
    #[error("libnccl.so.2 not found: pip install nvidia-nccl-cu13 or apt install libnccl2, or set LD_LIBRARY_PATH")]
    NoNccl,
    /// A library that loads but lacks entry points the backend calls.
    #[error("{library} lacks {}: {fix}", .names.join(", "))]
    MissingSymbols { library: &'static str, names: Vec<&'static str>, fix: &'static str },
    /// Only `libnccl.so.2` exists and re-executing is not an option: the fix by hand.
    #[error("{}", manual_fix(.so2))]
    NcclNeedsLink { so2: PathBuf },
    /// The re-exec happened, the link is first on `LD_LIBRARY_PATH`, and NCCL still does not load.
    #[error(
        "{} was linked as libnccl.so in {} but does not load: check `ldd {}` for a missing dependency, \
         or reinstall NCCL",
        .so2.display(),
        .dir.display(),
        .so2.display()
    )]
    NcclDoesNotLoad { so2: PathBuf, dir: PathBuf },
    #[error(
        "NCCL is installed as {} but could not be linked as libnccl.so in {} ({error}): {}",
        .so2.display(),
        .temp_dir.display(),
        manual_fix(.so2)
    )]
    NcclLinkFailed { so2: PathBuf, temp_dir: PathBuf, error: std::io::Error },
    #[error("cannot find this program to restart it ({error}): {}", manual_fix(.so2))]
    NoProgram { so2: PathBuf, error: std::io::Error },
    #[error(
        "restarting {} with NCCL on LD_LIBRARY_PATH failed ({error}): {}",
        .exe.display(),
        manual_fix(.so2)
    )]
    ReexecFailed { so2: PathBuf, exe: PathBuf, error: std::io::Error },
}

/// The benchmark reports what the machine lacks as its `Unavailable` kind: exit 2, no result.
impl From<CudaUnavailable> for BenchError {
    fn from(error: CudaUnavailable) -> Self {
        BenchError::Unavailable(error.to_string())
    }
}

/// Number of visible GPUs, or what is missing and how to fix it. Never panics: each library is
/// looked for before cudarc is allowed to load it.
pub fn probe() -> Result<u32, CudaUnavailable> {
    if !ffi::driver_present() {
        return Err(CudaUnavailable::NoDriver);
    }
    let count = match CudaContext::device_count() {
        Ok(n) if n > 0 => u32::try_from(n).unwrap_or(0),
        Ok(_) | Err(DriverError(CUresult::CUDA_ERROR_NO_DEVICE)) => return Err(CudaUnavailable::NoDevice),
        Err(e) => return Err(CudaUnavailable::DriverFailed(e)),
    };
    match ffi::driver_cuda_version() {
        Some(v) if v >= MIN_DRIVER_CUDA => {}
        Some(v) => return Err(CudaUnavailable::DriverTooOld(v)),
        None => return Err(CudaUnavailable::NoDriver),
    }
    complete(ffi::Lib::Driver)?;
    preload_cublas()?;
    if !ffi::cublas_present() {
        return Err(CudaUnavailable::NoCublas);
    }
    complete(ffi::Lib::Cublas)?;
    match nccl_status() {
        NcclStatus::Missing => Err(CudaUnavailable::NoNccl),
        NcclStatus::Loadable => complete(ffi::Lib::Nccl).map(|()| count),
        // Checked once the restart has made it loadable (`nccl_loadable`).
        NcclStatus::OnlySo2(_) => Ok(count),
    }
}

/// `Err` naming the entry points of `lib` the backend calls and the loaded library lacks (an old
/// driver, NCCL before 2.14, a stub or a look-alike library), with the fix. Call only when the
/// library is present.
fn complete(lib: ffi::Lib) -> Result<(), CudaUnavailable> {
    let (symbols, library, fix): (&[&'static str], _, _) = match lib {
        ffi::Lib::Driver => (
            &DRIVER_SYMBOLS,
            "libcuda (the NVIDIA driver)",
            "commgate needs a driver for CUDA 12.8 or newer (R570+): update the driver, or use --backend cpu",
        ),
        ffi::Lib::Cublas => (
            &CUBLAS_SYMBOLS,
            "libcublas",
            "commgate needs cuBLAS 12 or 13: pip install nvidia-cublas-cu12 (torch's) or install the CUDA toolkit's \
             cuBLAS, or use --backend cpu",
        ),
        ffi::Lib::Nccl => (
            &NCCL_SYMBOLS,
            "libnccl",
            "commgate needs NCCL 2.14 or newer: pip install nvidia-nccl-cu13 (or -cu12), or use --backend cpu",
        ),
    };
    let names = ffi::missing_symbols(lib, symbols);
    if names.is_empty() {
        Ok(())
    } else {
        Err(CudaUnavailable::MissingSymbols { library, names, fix })
    }
}

/// Whether the driver exports the timing barrier's stream wait ([`BARRIER_SYMBOL`]).
pub(super) fn barrier_symbol_present() -> bool {
    ffi::missing_symbols(ffi::Lib::Driver, &[BARRIER_SYMBOL]).is_empty()
}

/// Readies CUDA's libraries at the start of a command that may run the CUDA backend: on the main
/// thread, before anything a restart would lose exists (the base commit's temporary copy of its
/// baselines, threads, sockets). Where only `libnccl.so.2` is installed this re-executes the
/// program with the link first on `LD_LIBRARY_PATH` (see the module doc) and does not return;
/// in the restarted program it loads NCCL for good and removes the link directory. Without an
/// NVIDIA driver it does nothing. A failure is left for the backend to report with its fix, when
/// (and only if) it needs NCCL.
pub fn prepare_at_start() {
    if !ffi::driver_present() {
        return;
    }
    match nccl_status() {
        NcclStatus::OnlySo2(so2) => {
            let _ = reexec_with_link(&so2);
        }
        NcclStatus::Loadable if std::env::var_os(LINK_DIR_ENV).is_some() => {
            // Restarted with the link: NCCL is loaded now, through it, and stays loaded.
            ffi::keep_nccl_loaded();
            remove_own_link_dir();
        }
        NcclStatus::Loadable | NcclStatus::Missing => {}
    }
}

/// Whether NCCL loads for the backend, with the fix when not: [`prepare_at_start`] has had its
/// chance to restart the program, and nothing restarts it later (a worker thread, an open
/// rendezvous or a base commit's temporary copy would be lost).
pub fn nccl_loadable() -> Result<(), CudaUnavailable> {
    match nccl_status() {
        NcclStatus::Loadable => complete(ffi::Lib::Nccl),
        NcclStatus::Missing => Err(CudaUnavailable::NoNccl),
        NcclStatus::OnlySo2(so2) => Err(CudaUnavailable::NcclNeedsLink { so2 }),
    }
}

/// Where NCCL stands for cudarc.
pub(super) enum NcclStatus {
    /// cudarc finds NCCL under one of its names.
    Loadable,
    /// Only `libnccl.so.2` exists, at this path.
    OnlySo2(PathBuf),
    Missing,
}

pub(super) fn nccl_status() -> NcclStatus {
    if ffi::nccl_present() {
        NcclStatus::Loadable
    } else {
        find_so2().map_or(NcclStatus::Missing, NcclStatus::OnlySo2)
    }
}

/// The fix to print when re-executing is not an option.
fn manual_fix(so2: &Path) -> String {
    format!(
        "NCCL is installed as {} but cudarc loads only libnccl.so: run `ln -s {} DIR/libnccl.so` \
         and start again with DIR first on LD_LIBRARY_PATH",
        so2.display(),
        so2.display()
    )
}

/// A library cudarc loads, as installed on its own: where pip's wheels put it (under
/// site-packages) and the file names looked for there, in order.
struct Installed {
    wheel_dirs: &'static [&'static str],
    files: &'static [&'static str],
}

/// NCCL: `nvidia-nccl-cu12`/`-cu13` and Debian's `libnccl2` install only `libnccl.so.2`.
const NCCL: Installed = Installed { wheel_dirs: &["nvidia/nccl/lib"], files: &["libnccl.so.2"] };

/// cuBLAS under the names cudarc asks for (its CUDA 13 bindings try `.so.13`, then `.so.12`):
/// `nvidia-cublas-cu12` (what torch's CUDA 12 wheels pull in), and the CUDA 13 wheels, which
/// share one `nvidia/cu13/lib`.
const CUBLAS: Installed = Installed {
    wheel_dirs: &["nvidia/cublas/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"],
    files: &["libcublas.so.13", "libcublas.so.12"],
};

/// The first of `lib`'s files in the directories [`candidate_dirs`] lists.
fn find(lib: &Installed) -> Option<PathBuf> {
    first_file(&candidate_dirs(&SearchEnv::from_process(), &system_prefixes(), lib.wheel_dirs), lib.files)
}

/// The installed `libnccl.so.2`, if any.
fn find_so2() -> Option<PathBuf> {
    find(&NCCL)
}

/// The first directory holding one of `files` (in `files`' order within a directory), as the
/// file's path.
fn first_file(dirs: &[PathBuf], files: &[&str]) -> Option<PathBuf> {
    dirs.iter().flat_map(|dir| files.iter().map(move |f| dir.join(f))).find(|p| p.is_file())
}

/// Makes cuBLAS loadable when cudarc's bare names do not find it (a host whose only cuBLAS is
/// the one pip installed with torch: nothing puts `site-packages/nvidia/cublas/lib` on the
/// loader's path). The library found is loaded by its path and kept: glibc then answers
/// cudarc's later `dlopen("libcublas.so.12")` with it, matched by its soname, so no restart is
/// needed. `Err` when one was found and does not load.
fn preload_cublas() -> Result<(), CudaUnavailable> {
    if ffi::cublas_present() {
        return Ok(());
    }
    let Some(path) = find(&CUBLAS) else { return Ok(()) };
    ffi::load_resident(&path).map_err(|error| CudaUnavailable::CublasDoesNotLoad { path, error })
}

/// The variables the NCCL search reads (a test supplies its own).
#[derive(Debug, Default)]
struct SearchEnv {
    ld_library_path: Option<OsString>,
    virtual_env: Option<OsString>,
    conda_prefix: Option<OsString>,
    home: Option<OsString>,
    /// `PATH`: a virtualenv whose `bin` is on it counts as active (an image that puts
    /// `/opt/venv/bin` first on `PATH` and never sets `VIRTUAL_ENV`).
    path: Option<OsString>,
}

impl SearchEnv {
    fn from_process() -> Self {
        SearchEnv {
            ld_library_path: std::env::var_os("LD_LIBRARY_PATH"),
            virtual_env: std::env::var_os("VIRTUAL_ENV"),
            conda_prefix: std::env::var_os("CONDA_PREFIX"),
            home: std::env::var_os("HOME"),
            path: std::env::var_os("PATH"),
        }
    }
}

/// Where Python installs live when no environment variable names one: the system's, and a
/// conda base in its usual place.
fn system_prefixes() -> Vec<PathBuf> {
    ["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from).to_vec()
}

/// Where a library may be, in the order looked at: `LD_LIBRARY_PATH`; the site-packages of the
/// active virtualenv, the active conda environment, the user's `~/.local` and the system prefixes,
/// each at the library's `wheel_dirs` (pip's `nvidia-nccl-cu12`/`-cu13` wheels put NCCL in
/// `nvidia/nccl/lib`); then the system library directories and the CUDA toolkit's.
///
/// Found by listing directories only. Asking `python3` where `nvidia.nccl` lives would run
/// code: `find_spec` imports the package's parent, and `./nvidia/__init__.py` in the working
/// directory (a pull request's checkout) comes first on Python's path, in a process that would
/// inherit the job's environment and tokens.
fn candidate_dirs(env: &SearchEnv, system: &[PathBuf], wheel_dirs: &[&str]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = env
        .ld_library_path
        .as_ref()
        .map(|paths| std::env::split_paths(paths).filter(|p| !p.as_os_str().is_empty()).collect())
        .unwrap_or_default();
    let mut prefixes: Vec<PathBuf> =
        [&env.virtual_env, &env.conda_prefix].into_iter().flatten().map(PathBuf::from).collect();
    if let Some(conda) = &env.conda_prefix {
        dirs.push(PathBuf::from(conda).join("lib"));
    }
    prefixes.extend(venvs_on_path(env.path.as_deref()));
    if let Some(home) = &env.home {
        prefixes.push(PathBuf::from(home).join(".local"));
    }
    prefixes.extend(system.iter().cloned());
    for prefix in prefixes {
        for lib in ["lib", "lib64"] {
            for sp in site_packages(&prefix.join(lib)) {
                dirs.extend(wheel_dirs.iter().map(|w| sp.join(w)));
            }
        }
    }
    dirs.extend(
        [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/lib64",
            "/usr/lib",
            "/usr/local/cuda/lib64",
            "/usr/local/nccl/lib",
            "/opt/nccl/lib",
        ]
        .map(PathBuf::from),
    );
    dirs
}

/// The virtualenvs whose `bin` directory is on `PATH`, in `PATH`'s order: a directory named
/// `bin` whose parent holds `pyvenv.cfg` (the file every venv has). Listed, never run.
fn venvs_on_path(path: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    let Some(path) = path else { return Vec::new() };
    std::env::split_paths(path)
        .filter(|dir| dir.file_name().is_some_and(|name| name == "bin"))
        .filter_map(|dir| dir.parent().map(Path::to_path_buf))
        .filter(|prefix| prefix.join("pyvenv.cfg").is_file())
        .collect()
}

/// `LIB/python3*/{site,dist}-packages` and `LIB/python3/dist-packages` (Debian), newest Python
/// first (a venv rebuilt for a newer Python may keep the old directory).
fn site_packages(lib: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(lib) else {
        return Vec::new();
    };
    let mut pythons: Vec<(u32, PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let minor = name.to_str()?.strip_prefix("python3")?;
            let minor = match minor.strip_prefix('.') {
                Some(m) => m.parse().ok()?,
                None if minor.is_empty() => 0,
                None => return None,
            };
            Some((minor, entry.path()))
        })
        .collect();
    pythons.sort_by(|a, b| b.cmp(a));
    pythons.into_iter().flat_map(|(_, dir)| [dir.join("site-packages"), dir.join("dist-packages")]).collect()
}

/// Re-executes this program with a private `libnccl.so` link first on `LD_LIBRARY_PATH`.
/// Returns only on failure.
fn reexec_with_link(so2: &Path) -> Result<(), CudaUnavailable> {
    if let Some(dir) = std::env::var_os(LINK_DIR_ENV).map(PathBuf::from) {
        // Already re-executed with a working link and still no NCCL: the library is broken.
        if dir.join("libnccl.so").exists() && first_library_dir().as_deref() == Some(dir.as_path()) {
            return Err(CudaUnavailable::NcclDoesNotLoad { so2: so2.to_path_buf(), dir });
        }
    }
    let dir = make_link_dir(so2).map_err(|error| CudaUnavailable::NcclLinkFailed {
        so2: so2.to_path_buf(),
        temp_dir: std::env::temp_dir(),
        error,
    })?;
    let mut library_path = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|old| !old.is_empty()) {
        library_path.push(":");
        library_path.push(old);
    }
    let exe = std::env::current_exe().map_err(|error| CudaUnavailable::NoProgram { so2: so2.to_path_buf(), error })?;
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    // Whatever is buffered would be lost by exec.
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    let error = std::process::Command::new(&exe)
        .arg0(arg0)
        .args(args)
        .env("LD_LIBRARY_PATH", library_path)
        .env(LINK_DIR_ENV, &dir)
        .exec();
    let _ = std::fs::remove_file(dir.join("libnccl.so"));
    let _ = std::fs::remove_dir(&dir);
    Err(CudaUnavailable::ReexecFailed { so2: so2.to_path_buf(), exe, error })
}

fn first_library_dir() -> Option<PathBuf> {
    std::env::var_os("LD_LIBRARY_PATH").and_then(|paths| std::env::split_paths(&paths).next())
}

/// A fresh directory of ours under the temp dir (created, never reused, so nobody else's),
/// holding `libnccl.so` → `so2`.
fn make_link_dir(so2: &Path) -> std::io::Result<PathBuf> {
    let base = std::env::temp_dir();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let mut last = None;
    for attempt in 0..16u32 {
        let dir = base.join(format!("{DIR_PREFIX}{}-{nanos}-{attempt}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                let target = so2.canonicalize().unwrap_or_else(|_| so2.to_path_buf());
                if let Err(e) = std::os::unix::fs::symlink(&target, dir.join("libnccl.so")) {
                    let _ = std::fs::remove_dir(&dir);
                    return Err(e);
                }
                return Ok(dir);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no directory name left")))
}

/// Once NCCL is loaded, removes the link directory the re-exec made — only ours: a
/// `commgate-nccl-*` directory under the temp dir, holding nothing but the link.
pub(super) fn remove_own_link_dir() {
    let Some(dir) = std::env::var_os(LINK_DIR_ENV).map(PathBuf::from) else {
        return;
    };
    let ours = dir.parent() == Some(std::env::temp_dir().as_path())
        && dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with(DIR_PREFIX));
    let link = dir.join("libnccl.so");
    if ours && link.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_dir_names_the_so2_as_cudarc_looks_for_it() {
        let lib = tempfile::NamedTempFile::new().ok();
        let Some(lib) = lib else { panic!("no temp file") };
        let dir = make_link_dir(lib.path()).ok();
        let Some(dir) = dir else { panic!("no link dir") };
        let link = dir.join("libnccl.so");
        let target = std::fs::read_link(&link).ok();
        assert_eq!(target, lib.path().canonicalize().ok());
        assert!(dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with("commgate-nccl-")));
        assert_eq!(dir.parent(), Some(std::env::temp_dir().as_path()));
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn each_absence_reads_as_one_line_with_its_fix() {
        let so2 = PathBuf::from("/opt/nccl/lib/libnccl.so.2");
        assert_eq!(
            CudaUnavailable::DriverTooOld(12040).to_string(),
            "the NVIDIA driver supports CUDA 12.4, commgate's CUDA backend needs 12.8 or newer (driver R570+): \
             update the driver, or use --backend cpu"
        );
        assert_eq!(
            CudaUnavailable::NoCublas.to_string(),
            "libcublas.so.13/.so.12 not found on LD_LIBRARY_PATH, in pip's nvidia/cublas/lib or nvidia/cu13/lib, or in \
             the system's library directories: pip install nvidia-cublas-cu12 (torch's) or install the CUDA \
             toolkit's cuBLAS, or set LD_LIBRARY_PATH"
        );
        let path = PathBuf::from("/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12");
        assert_eq!(
            CudaUnavailable::CublasDoesNotLoad { path, error: "libcublasLt.so.12: cannot open".into() }.to_string(),
            "/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12 was found but does not load \
             (libcublasLt.so.12: cannot open): check `ldd /venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12` \
             for a missing dependency"
        );
        let fix = "NCCL is installed as /opt/nccl/lib/libnccl.so.2 but cudarc loads only libnccl.so: run \
                   `ln -s /opt/nccl/lib/libnccl.so.2 DIR/libnccl.so` and start again with DIR first on LD_LIBRARY_PATH";
        assert_eq!(CudaUnavailable::NcclNeedsLink { so2: so2.clone() }.to_string(), fix);
        let error = || std::io::Error::other("boom");
        assert_eq!(
            CudaUnavailable::ReexecFailed { so2: so2.clone(), exe: PathBuf::from("/bin/commgate"), error: error() }
                .to_string(),
            format!("restarting /bin/commgate with NCCL on LD_LIBRARY_PATH failed (boom): {fix}")
        );
        assert_eq!(
            CudaUnavailable::NoProgram { so2: so2.clone(), error: error() }.to_string(),
            format!("cannot find this program to restart it (boom): {fix}")
        );
        let all = [
            CudaUnavailable::NoDriver,
            CudaUnavailable::NoDevice,
            CudaUnavailable::NoNccl,
            CudaUnavailable::NcclDoesNotLoad { so2: so2.clone(), dir: PathBuf::from("/tmp/commgate-nccl-1") },
            CudaUnavailable::NcclLinkFailed { so2, temp_dir: PathBuf::from("/tmp"), error: error() },
        ];
        for unavailable in all {
            let message = unavailable.to_string();
            let fixes = ["install", "CUDA_VISIBLE_DEVICES", "--backend cpu", "LD_LIBRARY_PATH"];
            assert!(!message.contains('\n') && fixes.iter().any(|fix| message.contains(fix)), "{message}");
            assert_eq!(BenchError::from(unavailable), BenchError::Unavailable(message));
        }
    }

    fn first_so2(env: &SearchEnv, system: &[PathBuf]) -> Option<PathBuf> {
        first_file(&candidate_dirs(env, system, NCCL.wheel_dirs), NCCL.files)
    }

    /// torch's pip layout: cuBLAS under `nvidia/cublas/lib` (CUDA 12 wheels) or `nvidia/cu13/lib`
    /// (CUDA 13), found in the virtualenv and preferred as cudarc prefers: `.so.13` first within
    /// a directory, the first directory first.
    #[test]
    fn cublas_is_found_where_torch_installed_it() {
        let root = tempfile::tempdir().expect("tempdir");
        let venv = root.path().join("venv");
        let sp = venv.join("lib/python3.12/site-packages");
        let cu12 = sp.join("nvidia/cublas/lib");
        std::fs::create_dir_all(&cu12).expect("mkdir");
        std::fs::write(cu12.join("libcublas.so.12"), "").expect("write");
        std::fs::write(cu12.join("libcublasLt.so.12"), "").expect("write");
        let env = SearchEnv { virtual_env: Some(venv.clone().into_os_string()), ..SearchEnv::default() };
        let found = |env: &SearchEnv| first_file(&candidate_dirs(env, &[], CUBLAS.wheel_dirs), CUBLAS.files);
        assert_eq!(found(&env), Some(cu12.join("libcublas.so.12")));
        std::fs::write(cu12.join("libcublas.so.13"), "").expect("write");
        assert_eq!(found(&env), Some(cu12.join("libcublas.so.13")));
        // Not in a venv that is not active, and NCCL's search does not take it for NCCL.
        assert_eq!(found(&SearchEnv::default()).filter(|p| p.starts_with(root.path())), None);
        assert_eq!(first_so2(&env, &[]).filter(|p| p.starts_with(root.path())), None);
        // CUDA 13's shared directory.
        let cu13 = root.path().join("v13/lib/python3.13/site-packages/nvidia/cu13/lib");
        std::fs::create_dir_all(&cu13).expect("mkdir");
        std::fs::write(cu13.join("libcublas.so.13"), "").expect("write");
        let env = SearchEnv { virtual_env: Some(root.path().join("v13").into_os_string()), ..SearchEnv::default() };
        assert_eq!(found(&env), Some(cu13.join("libcublas.so.13")));
    }

    /// What is found but is no library is an error that names it, never a panic.
    #[test]
    fn a_file_that_is_no_library_does_not_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fake = dir.path().join("libcublas.so.12");
        std::fs::write(&fake, "not an ELF file").expect("write");
        let error = ffi::load_resident(&fake).expect_err("no library");
        assert!(!error.is_empty());
    }

    /// A fake `prefix/lib/<python>/<packages>/nvidia/nccl/lib/libnccl.so.2`.
    fn fake_wheel(prefix: &Path, python: &str, packages: &str) -> PathBuf {
        let lib = prefix.join("lib").join(python).join(packages).join("nvidia/nccl/lib");
        std::fs::create_dir_all(&lib).expect("mkdir");
        let so2 = lib.join("libnccl.so.2");
        std::fs::write(&so2, "").expect("write");
        so2
    }

    #[test]
    fn pip_wheels_are_found_by_listing_site_packages() {
        let root = tempfile::tempdir().expect("tempdir");
        let (venv, home, usr) = (root.path().join("venv"), root.path().join("home"), root.path().join("usr"));
        let in_venv = fake_wheel(&venv, "python3.12", "site-packages");
        let in_home = fake_wheel(&home.join(".local"), "python3.11", "site-packages");
        let in_usr = fake_wheel(&usr, "python3", "dist-packages");
        // Not Python 3's: never looked at.
        fake_wheel(&venv, "python2.7", "site-packages");
        let env = |venv: bool, home: bool| SearchEnv {
            virtual_env: venv.then(|| root.path().join("venv").into_os_string()),
            home: home.then(|| root.path().join("home").into_os_string()),
            ..SearchEnv::default()
        };
        let system = [usr.clone()];
        assert_eq!(first_so2(&env(true, true), &system), Some(in_venv));
        assert_eq!(first_so2(&env(false, true), &system), Some(in_home));
        assert_eq!(first_so2(&env(false, false), &system), Some(in_usr.clone()));
        // LD_LIBRARY_PATH comes first; conda's own lib/ too.
        let ld = SearchEnv { ld_library_path: Some(in_usr.parent().expect("dir").into()), ..env(true, true) };
        assert_eq!(first_so2(&ld, &system), Some(in_usr));
        let conda = root.path().join("conda");
        std::fs::create_dir_all(conda.join("lib")).expect("mkdir");
        std::fs::write(conda.join("lib/libnccl.so.2"), "").expect("write");
        let env = SearchEnv { conda_prefix: Some(conda.clone().into_os_string()), ..SearchEnv::default() };
        assert_eq!(first_so2(&env, &system), Some(conda.join("lib/libnccl.so.2")));
    }

    /// A venv whose `bin` is on `PATH` is searched without `VIRTUAL_ENV` (torch's image puts
    /// `/opt/torch/.venv/bin` first on `PATH`); a `bin` on `PATH` that is no venv is not.
    #[test]
    fn a_venv_on_path_is_searched() {
        let root = tempfile::tempdir().expect("tempdir");
        let venv = root.path().join("opt/torch/.venv");
        let lib = venv.join("lib/python3.12/site-packages/nvidia/nccl/lib");
        std::fs::create_dir_all(&lib).expect("mkdir");
        std::fs::create_dir_all(venv.join("bin")).expect("mkdir");
        std::fs::write(lib.join("libnccl.so.2"), "").expect("write");
        let path = std::env::join_paths([root.path().join("usr/bin"), venv.join("bin")]).expect("join");
        let env = SearchEnv { path: Some(path), ..SearchEnv::default() };
        assert_eq!(first_so2(&env, &[]).filter(|p| p.starts_with(root.path())), None, "no pyvenv.cfg yet");
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").expect("write");
        assert_eq!(first_so2(&env, &[]), Some(lib.join("libnccl.so.2")));
    }

    #[test]
    fn the_newest_python_comes_first() {
        let root = tempfile::tempdir().expect("tempdir");
        let newer = fake_wheel(root.path(), "python3.12", "site-packages");
        fake_wheel(root.path(), "python3.9", "site-packages");
        let env = SearchEnv { virtual_env: Some(root.path().into()), ..SearchEnv::default() };
        assert_eq!(first_so2(&env, &[]), Some(newer));
    }

    /// The search starts no other program (Python would import from the working directory): the
    /// only process this module starts is the re-exec of this very program (`current_exe`).
    #[test]
    fn the_search_starts_no_python() {
        let source = include_str!("discovery.rs");
        let code = source.split("#[cfg(test)]").next().unwrap_or(source);
        assert!(!code.contains("Command::new(\""), "the NCCL search must not run another program (Python)");
        assert_eq!(code.matches("Command::new(").count(), 1, "only the re-exec of this program");
        assert!(code.contains("Command::new(&exe)"));
    }
}
