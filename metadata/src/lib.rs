//! placeholder, rewritten below
pub mod command;
pub mod ids;
pub mod placement;
pub mod state;
pub mod store;

use std::io::Cursor;

pub use command::{ApplyError, Command, CommandResult, Response};
pub use state::MetadataState;

openraft::declare_raft_types!(
    /// The openraft type configuration of the metadata quorum: node ids are `u64` (a broker's
    /// `node.id`), nodes are addressed by their internal RPC address.
    pub TypeConfig:
        D = Command,
        R = CommandResult,
);
