//! A shared library with no tessera entry point, for the loader's "missing entry point" test.

/// Something to export that is not `tessera_backend_init`.
#[unsafe(no_mangle)]
pub extern "C" fn not_a_tessera_plugin() -> u32 {
    7
}
