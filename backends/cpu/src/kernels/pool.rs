//! POOL_2D

use tessera_core::{Error, Pool2dParams, Result};

use super::{NodeTensors, Scratch};

pub fn pool_2d(_n: &NodeTensors, _s: &mut Scratch, _p: Pool2dParams) -> Result<()> {
    Err(Error::Cancelled)
}
