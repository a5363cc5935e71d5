//! The darwin system calls behind the macOS data plane and daemon, one file per topic.

pub mod dirwatch;
