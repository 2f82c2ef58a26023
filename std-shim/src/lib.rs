//! tessera-std: std glue.
