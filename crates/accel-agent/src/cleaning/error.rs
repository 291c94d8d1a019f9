//! Why a cleaning failed. Its text is the reason the agent sends the server (shown in
//! the console and `accel device cleanings`), so each variant says which part of the
//! rule failed (`command`, `verify`, `pci-reset`, `fpga-default`) and how.

use std::path::PathBuf;

/// Which part of a rule ran: the method's command or the verification.
pub type Part = &'static str;

#[derive(Debug, Clone, thiserror::Error)]
pub enum CleanError {
    #[error("device {address} is not on this node now")]
    Gone { address: String },
    #[error("no [[cleaning]] rule of this agent matches the device at {address}")]
    NoRule { address: String },
    #[error("{part}: empty command")]
    Empty { part: Part },
    #[error("{part}: {program} could not be started: {cause}")]
    Start {
        part: Part,
        program: String,
        cause: String,
    },
    #[error("{part}: timed out (killed)")]
    TimedOut { part: Part },
    #[error("{part}: {program}: {cause}")]
    Wait {
        part: Part,
        program: String,
        cause: String,
    },
    #[error("{part}: {program} exited with {status}: {stderr_tail}")]
    Exited {
        part: Part,
        program: String,
        status: String,
        stderr_tail: String,
    },
    #[error("{arg:?} names {{device}} but the device at {address} has no device node")]
    NoDeviceNode { arg: String, address: String },
    #[error("pci-reset: writing 1 to {}: {cause}", path.display())]
    Reset { path: PathBuf, cause: String },
    #[error("pci-reset: timed out")]
    ResetTimedOut,
    #[error("pci-reset: {0}")]
    ResetTask(String),
    #[error("fpga-default runs through the agent's programming path")]
    NotHere,
    #[error("fpga-default: timed out")]
    ProgramTimedOut,
    /// The programming of the default image failed, with the programming's reason.
    #[error("fpga-default: {0}")]
    Program(String),
}
