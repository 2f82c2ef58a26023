//! IM2COL

use tessera_core::{Error, Im2ColParams, Result};

use super::{NodeTensors, Scratch};

pub fn im2col(_n: &NodeTensors, _s: &mut Scratch, _p: Im2ColParams) -> Result<()> {
    Err(Error::Cancelled)
}
