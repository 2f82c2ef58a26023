//! `--threads N` as programs take it: a positive whole number, capped at what the machine
//! can run in parallel (more threads than cores only adds switching, and tens of thousands
//! exhaust the process), with a notice when it was capped.

/// A thread count a program will use, and the notice to print when it is not the one asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadCount {
    pub threads: usize,
    /// "--threads 100000: capped at 16, the processors this machine offers" when capped.
    pub notice: Option<String>,
}

/// What the machine can run in parallel (1 when it cannot tell).
pub fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `value` of `--threads` read against this machine's [`available`] parallelism.
pub fn parse_threads(value: &str) -> Result<ThreadCount, String> {
    parse_threads_for(value, available())
}

/// `value` of `--threads` for a machine that runs `available` threads in parallel: an error
/// for anything but a positive whole number, capped at `available`.
pub fn parse_threads_for(value: &str, available: usize) -> Result<ThreadCount, String> {
    let expected = format!("expected a whole number of threads from 1 to {available}");
    let requested = match value.trim().parse::<i128>() {
        Ok(n) if n >= 1 => n,
        Ok(n) => return Err(format!("--threads {n}: {expected}")),
        Err(_) => return Err(format!("--threads '{value}': {expected}")),
    };
    let available = available.max(1);
    match usize::try_from(requested) {
        Ok(n) if n <= available => Ok(ThreadCount { threads: n, notice: None }),
        _ => Ok(ThreadCount {
            threads: available,
            notice: Some(format!("--threads {requested}: capped at {available}, the processors this machine offers")),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_are_positive_and_capped_at_the_machine() {
        assert_eq!(parse_threads_for("3", 8), Ok(ThreadCount { threads: 3, notice: None }));
        let capped = parse_threads_for("100000", 8).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(capped.threads, 8);
        assert_eq!(capped.notice.as_deref(), Some("--threads 100000: capped at 8, the processors this machine offers"));
        let huge = parse_threads_for("99999999999999999999999", 4).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(huge.threads, 4);
        for bad in ["0", "-4", "two", "", "1.5"] {
            let err = parse_threads_for(bad, 8).unwrap_err();
            assert!(err.contains("expected a whole number of threads from 1 to 8"), "{bad}: {err}");
        }
        assert!(parse_threads("1").is_ok());
    }
}
