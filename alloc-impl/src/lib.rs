//! tessera-alloc: allocation support for bare-metal targets.
#![no_std]
