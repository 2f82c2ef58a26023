//! `export_backend!`: a plugin's entry points in one line.

/// Defines a plugin's entry points for a backend family.
///
/// ```ignore
/// tessera_plugin_abi::export_backend!(reg: &my_backend::MY_REG, score: my_score);
/// ```
///
/// `reg` is a `&'static dyn BackendReg` expression; `score` (optional) a `fn() -> u32`
/// returning 0 when the plugin cannot run on this machine and otherwise a number that is
/// larger the better suited this build is. The crate must be a `cdylib` with `std`. Defines
/// `tessera_backend_abi_version`, `tessera_backend_init` and, with `score`,
/// `tessera_backend_score`; every call into the plugin catches panics.
#[macro_export]
macro_rules! export_backend {
    (reg: $reg:expr $(, score: $score:expr)? $(,)?) => {
        #[doc(hidden)]
        pub struct __TesseraPluginExport;

        impl $crate::export::Exporter for __TesseraPluginExport {
            fn reg() -> &'static dyn $crate::export::BackendReg {
                $reg
            }
            fn catch<R>(f: impl FnOnce() -> R) -> ::core::result::Result<R, ::std::string::String> {
                ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(f))
                    .map_err(|p| $crate::export::panic_message(&*p))
            }
        }

        static __TESSERA_REG: ::std::sync::OnceLock<$crate::export::RegHandle> = ::std::sync::OnceLock::new();

        /// The plugin ABI version this plugin was built for.
        #[unsafe(no_mangle)]
        pub extern "C" fn tessera_backend_abi_version() -> u32 {
            $crate::abi::ABI_VERSION
        }

        /// The plugin's reg table, or null with `err` filled in.
        ///
        /// # Safety
        /// `host` and `err` must be null or valid, as the plugin ABI describes.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn tessera_backend_init(
            host: *const $crate::abi::AbiHostInfo,
            err: *mut $crate::abi::AbiError,
        ) -> *const $crate::tables::AbiReg {
            // SAFETY: forwarded from the host, which follows the plugin ABI.
            unsafe {
                $crate::export::init::<__TesseraPluginExport>(host, err, || {
                    *__TESSERA_REG.get_or_init($crate::export::export_reg::<__TesseraPluginExport>)
                })
            }
        }

        $(
            /// How well this build suits this machine (0: it cannot run here).
            #[unsafe(no_mangle)]
            pub extern "C" fn tessera_backend_score() -> u32 {
                $crate::export::score::<__TesseraPluginExport>($score)
            }
        )?
    };
}
