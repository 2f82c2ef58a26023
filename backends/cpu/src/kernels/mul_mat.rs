//! MUL_MAT

use tessera_core::{Error, Result};

use super::{NodeTensors, Scratch};

pub fn mul_mat(_n: &NodeTensors, _s: &mut Scratch) -> Result<()> { Err(Error::Cancelled) }
