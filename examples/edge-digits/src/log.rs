//! Logging: through `defmt` with the `defmt` feature, nothing otherwise.

#[cfg(feature = "defmt")]
macro_rules! info {
    ($($arg:tt)*) => { defmt::info!($($arg)*) };
}

/// Without defmt the arguments are only borrowed, so that they count as used.
#[cfg(not(feature = "defmt"))]
macro_rules! info {
    ($fmt:literal $(, $arg:expr)* $(,)?) => {{ $( let _ = &$arg; )* }};
}

#[cfg(feature = "defmt")]
macro_rules! warn {
    ($($arg:tt)*) => { defmt::warn!($($arg)*) };
}

#[cfg(not(feature = "defmt"))]
macro_rules! warn {
    ($fmt:literal $(, $arg:expr)* $(,)?) => {{ $( let _ = &$arg; )* }};
}
