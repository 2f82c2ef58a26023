//! The example programs as a user runs them: bad arguments are a message and a failing exit
//! status, a closed output pipe ends them quietly, never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "plugin_support/mod.rs"]
mod plugin_support;

use std::path::Path;
use std::process::{Command, Output};

use plugin_support::{built_example, PluginDir};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `exe args` in a scratch directory, with tessera's variables cleared.
fn run(exe: &Path, args: &[&str]) -> Output {
    let cwd = PluginDir::new("program-cwd");
    let mut command = Command::new(exe);
    command.args(args).current_dir(&cwd.path);
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("TESSERA_")) {
        command.env_remove(key);
    }
    command.output().expect("running the example")
}

/// The exit status and standard error of `exe args` writing into a pipe whose reader has
/// already gone (as in `exe args | head -1` after `head` has exited).
fn run_into_closed_pipe(exe: &Path, args: &[&str]) -> (i32, String) {
    // The reader (`true`) exits at once; the program starts after it, so its first write
    // finds the pipe closed. Its status is reported on standard error.
    let script = r#"{ sleep 0.3; "$0" "$@"; echo "status=$?" >&2; } | true"#;
    let out = Command::new("bash").arg("-c").arg(script).arg(exe).args(args).output().expect("running bash");
    let stderr = text(&out.stderr);
    let status = stderr.lines().rev().find_map(|l| l.strip_prefix("status=")).and_then(|s| s.parse().ok());
    (status.unwrap_or_else(|| panic!("no status in {stderr}")), stderr)
}

fn assert_no_panic(stderr: &str) {
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn programs_end_quietly_when_their_output_pipe_is_closed() {
    for (name, args) in [("embed", &["--help"][..]), ("bench", &["--help"][..]), ("devices", &[][..])] {
        let exe = built_example(name);
        let (status, stderr) = run_into_closed_pipe(&exe, args);
        assert_no_panic(&stderr);
        assert_eq!(status, 141, "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: only the status line, no message: {stderr}");
    }
}

#[test]
fn thread_counts_are_positive_and_capped_at_the_machine() {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    for name in ["embed", "bench"] {
        let exe = built_example(name);
        for bad in ["0", "-1", "many"] {
            let out = run(&exe, &["--threads", bad, "x"]);
            let stderr = text(&out.stderr);
            assert_no_panic(&stderr);
            assert_eq!(out.status.code(), Some(1), "{name} --threads {bad}: {stderr}");
            assert!(stderr.contains("expected a whole number of threads from 1 to"), "{name}: {stderr}");
        }
    }
    let bench = built_example("bench");
    let out = run(&bench, &["--threads", "100000", "-o", "ADD", "-p", "no such case"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("--threads 100000: capped at {available}")), "{stderr}");
    assert!(text(&out.stdout).contains(&format!(", {available} threads)")), "{}", text(&out.stdout));
}

#[test]
fn bench_refuses_a_time_that_is_not_a_positive_number_of_seconds() {
    let exe = built_example("bench");
    for bad in ["-1", "0", "nan", "inf", "1e300", "soon"] {
        let out = run(&exe, &["--time", bad]);
        let stderr = text(&out.stderr);
        assert_no_panic(&stderr);
        assert_eq!(out.status.code(), Some(1), "--time {bad}: {stderr}");
        assert!(stderr.starts_with("bench: --time"), "{stderr}");
    }
}

#[test]
fn embed_refuses_arguments_it_would_otherwise_ignore() {
    let exe = built_example("embed");
    let cases: [(&[&str], &str); 4] = [
        (&["--repeat", "0", "x"], "--repeat: '0' is not a whole number of at least 1"),
        (&["--batch-size", "0", "x"], "--batch-size: '0' is not a whole number of at least 1"),
        (&["--type", "f16", "x"], "--type only applies with --convert OUT.gguf"),
        (&["--file", "no/such/file.txt"], "--file no/such/file.txt: "),
    ];
    for (args, expected) in cases {
        let out = run(&exe, args);
        let stderr = text(&out.stderr);
        assert_no_panic(&stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let help = text(&run(&exe, &["--help"]).stdout);
    for option in ["--tokenizer", "--batch-size", "--file", "--threads", "--repeat", "TESSERA_SCHED_DEBUG"] {
        assert!(help.contains(option), "--help lacks {option}");
    }
}

/// The default model is found from any directory (or the error says where it was looked for),
/// and a failed output names its path.
#[test]
fn embed_run_elsewhere_finds_the_default_model_or_says_where_it_looked() {
    let exe = built_example("embed");
    let out = run(&exe, &["--convert", "/nonexistent-dir/out.gguf"]);
    let stderr = text(&out.stderr);
    assert_no_panic(&stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let repo_model = plugin_support::workspace_root().join("weights/all-MiniLM-L6-v2/model.safetensors");
    if repo_model.exists() {
        assert!(stderr.contains("/nonexistent-dir/out.gguf"), "the output path is named: {stderr}");
    } else {
        assert!(
            stderr.contains("model not found; looked for weights/all-MiniLM-L6-v2/model.safetensors in"),
            "{stderr}"
        );
        assert!(stderr.contains(&repo_model.display().to_string()), "{stderr}");
    }
}

#[test]
fn devices_refuses_a_plugin_directory_that_is_missing_or_a_file() {
    let exe = built_example("devices");
    let dir = PluginDir::new("devices-arg");
    let file = dir.path.join("plain-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let missing = dir.path.join("missing");
    for (arg, expected) in [(&file, "is not a directory"), (&missing, "plugin directory")] {
        let out = run(&exe, &[arg.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert_no_panic(&stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.starts_with("devices: ") && stderr.contains(expected), "{stderr}");
    }
    assert!(run(&exe, &[dir.path.to_str().unwrap()]).status.success());
}

/// With the model: `embed --file ... | head -1` embeds batch by batch and ends quietly when the
/// reader goes; the whole file goes through in batches with a progress bar.
#[test]
#[ignore = "needs the MiniLM weights: scripts/fetch_minilm.sh"]
fn embed_streams_batches_and_ends_quietly_on_a_closed_pipe() {
    let model = plugin_support::workspace_root().join("weights/all-MiniLM-L6-v2/model.safetensors");
    assert!(model.exists(), "{} not found: fetch it with scripts/fetch_minilm.sh", model.display());
    let exe = built_example("embed");
    let dir = PluginDir::new("embed-file");
    let file = dir.path.join("sentences.txt");
    std::fs::write(&file, "One sentence.\n\nTwo sentences.\nThree.\nFour, the last.\nFive.\n").unwrap();
    let file = file.to_str().unwrap();
    let (status, stderr) = run_into_closed_pipe(&exe, &["--file", file, "--batch-size", "2"]);
    assert_no_panic(&stderr);
    assert_eq!(status, 141, "{stderr}");
    let out = run(&exe, &["--file", file, "--batch-size", "2"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(text(&out.stdout).lines().count(), 5);
    assert!(stderr.contains("embedding        [##############################] 5/5 sentences"), "{stderr}");
    assert!(stderr.contains("embedded 5 sentences in") && stderr.contains("(3 batch(es) of up to 2"), "{stderr}");
}
