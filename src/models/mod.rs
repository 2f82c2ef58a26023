//! Model graphs built from tessera ops.

pub mod bert;
