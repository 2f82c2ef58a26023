//! GET_ROWS

use tessera_core::{Error, Result};

use super::{NodeTensors, Scratch};

pub fn get_rows(_n: &NodeTensors, _s: &mut Scratch) -> Result<()> { Err(Error::Cancelled) }
