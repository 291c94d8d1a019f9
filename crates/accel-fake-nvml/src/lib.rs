//! A stand-in `libnvidia-ml.so` for tests (issue 45 item 6): a C-ABI shared library
//! exporting the NVML symbols accel's agent calls, so that the agent's real NVML code
//! path (libloading, `#[repr(C)]` structures, return codes) runs without a GPU.
//!
//! ```text
//! accel-fake-nvml.conf ──▶ Config ──▶ Fake (GPUs, GPU and compute instances)
//!                                       ▲            │ state_file (survives an agent
//! captures/*.lgip.txt, *.lgipp.txt ─────┘            │ restart, not a new boot_id)
//!                                                    ▼
//!             ffi: nvmlInit_v2, nvmlDeviceCreateGpuInstanceWithPlacement, ...
//! ```
//!
//! - **Geometry from hardware.** The MIG profiles (hardware ids, instances, memory,
//!   SMs, engines) and their placements are parsed from `nvidia-smi mig -lgip` and
//!   `-lgipp` text ([`capture`]); nothing is a table of this crate's own. See
//!   `captures/README.md` for where each capture comes from.
//! - **Conflicts enforced** ([`state`]): a GPU instance must start at one of its
//!   profile's placements, must not overlap another instance's memory slices, and the
//!   instances together must not exceed the profile's instance count or the GPU's
//!   engines; otherwise `NVML_ERROR_INSUFFICIENT_RESOURCES`, as NVML answers. NVIDIA's
//!   Go mocks check none of this.
//! - **Configured by a file** ([`config`]): `$ACCEL_FAKE_NVML_CONFIG`, or
//!   `accel-fake-nvml.conf` beside the loaded library (so tests that each copy the
//!   library into their own directory stay independent in one process). GPUs, models,
//!   MIG mode, a GPU that is lost, failure injection (a call that fails once, N times
//!   or always with a given NVML code), and the boot id file that decides whether the
//!   layout survived.
//!
//! Built for tests only (`crate-type = ["cdylib"]`, no dependencies, never linked by
//! the shipped binary): `accel_agent::testing::fake_nvml_library` builds it.

pub mod capture;
pub mod config;
mod ffi;
pub mod model;
pub mod state;

/// NVML's return codes (`nvmlReturn_t`) that the fake answers with.
pub mod code {
    pub const SUCCESS: u32 = 0;
    pub const UNINITIALIZED: u32 = 1;
    pub const INVALID_ARGUMENT: u32 = 2;
    pub const NOT_SUPPORTED: u32 = 3;
    pub const NOT_FOUND: u32 = 6;
    pub const INSUFFICIENT_SIZE: u32 = 7;
    pub const GPU_IS_LOST: u32 = 15;
    pub const IN_USE: u32 = 19;
    pub const INSUFFICIENT_RESOURCES: u32 = 23;
    pub const ARGUMENT_VERSION_MISMATCH: u32 = 25;
    pub const UNKNOWN: u32 = 999;

    /// Every code by its name without the `NVML_ERROR_` prefix (`nvmlReturn_t`), so a
    /// configuration can say `code=INSUFFICIENT_RESOURCES`.
    pub const NAMES: &[(&str, u32)] = &[
        ("SUCCESS", 0),
        ("UNINITIALIZED", 1),
        ("INVALID_ARGUMENT", 2),
        ("NOT_SUPPORTED", 3),
        ("NO_PERMISSION", 4),
        ("ALREADY_INITIALIZED", 5),
        ("NOT_FOUND", 6),
        ("INSUFFICIENT_SIZE", 7),
        ("INSUFFICIENT_POWER", 8),
        ("DRIVER_NOT_LOADED", 9),
        ("TIMEOUT", 10),
        ("IRQ_ISSUE", 11),
        ("LIBRARY_NOT_FOUND", 12),
        ("FUNCTION_NOT_FOUND", 13),
        ("CORRUPTED_INFOROM", 14),
        ("GPU_IS_LOST", 15),
        ("RESET_REQUIRED", 16),
        ("OPERATING_SYSTEM", 17),
        ("LIB_RM_VERSION_MISMATCH", 18),
        ("IN_USE", 19),
        ("MEMORY", 20),
        ("NO_DATA", 21),
        ("VGPU_ECC_NOT_SUPPORTED", 22),
        ("INSUFFICIENT_RESOURCES", 23),
        ("FREQ_NOT_SUPPORTED", 24),
        ("ARGUMENT_VERSION_MISMATCH", 25),
        ("DEPRECATED", 26),
        ("NOT_READY", 27),
        ("GPU_NOT_FOUND", 28),
        ("INVALID_STATE", 29),
        ("RESET_TYPE_NOT_SUPPORTED", 30),
        ("UNKNOWN", 999),
    ];

    /// The code a name or a number stands for.
    pub fn parse(s: &str) -> Option<u32> {
        let bare = s
            .trim_start_matches("NVML_ERROR_")
            .trim_start_matches("NVML_");
        NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(bare))
            .map(|(_, c)| *c)
            .or_else(|| s.parse().ok())
    }

    /// The name of a code, `UNKNOWN` for one NVML does not define.
    pub fn name(c: u32) -> &'static str {
        NAMES
            .iter()
            .find(|(_, n)| *n == c)
            .map_or("UNKNOWN", |(n, _)| n)
    }
}
