//! A parameter substituted into a shell-string `run:` stays one literal word: `--set` cannot make it shell syntax.

use crate::support::{Sandbox, text};

/// One node per quoting context an author may have written the substitution in (the leading `true NAME;`
/// keeps their commands, and so their keys, apart).
const PIPELINE: &str = r#"pipeline: inject
params:
  msg: hello
nodes:
  bare:
    kind: command
    outputs: [a.txt]
    run: true bare; echo {msg} > "$FRACFLOW_OUT/a.txt"
  double:
    kind: command
    outputs: [a.txt]
    run: true double; echo "{msg}" > "$FRACFLOW_OUT/a.txt"
  single:
    kind: command
    outputs: [a.txt]
    run: true single; echo '{msg}' > "$FRACFLOW_OUT/a.txt"
  nested:
    kind: command
    outputs: [a.txt]
    run: true nested; echo "$(echo {msg})" > "$FRACFLOW_OUT/a.txt"
"#;

/// Runs the pipeline with `msg` set to `value` and checks that every node wrote `value` itself and that no
/// `PWNED` file appeared.
fn writes_the_literal_text(value: &str) {
    let sandbox = Sandbox::new();
    sandbox.write("pipelines/inject.yaml", PIPELINE);
    let set = format!("msg={value}");
    let output = sandbox.run(&["run", "inject", "--set", &set]);
    assert!(output.status.success(), "{}", text(&output));
    for node in ["bare", "double", "single", "nested"] {
        let written = sandbox
            .results("inject")
            .join("latest/nodes")
            .join(node)
            .join("a.txt");
        let written = std::fs::read_to_string(&written)
            .unwrap_or_else(|e| panic!("{}: {e}", written.display()));
        assert_eq!(written, format!("{value}\n"), "node {node}");
    }
    assert!(
        !sandbox.path().join("PWNED").exists(),
        "a parameter value ran as shell code"
    );
}

#[test]
fn command_substitution_in_a_parameter_is_written_literally() {
    writes_the_literal_text("$(touch PWNED)");
}

#[test]
fn a_semicolon_in_a_parameter_is_written_literally() {
    writes_the_literal_text("a; touch PWNED");
}

#[test]
fn a_double_quote_in_a_parameter_does_not_break_out_of_the_authors_quotes() {
    writes_the_literal_text(r#"x"; touch PWNED; echo "y"#);
    writes_the_literal_text(r#"x'; touch PWNED; echo 'y"#);
}

#[test]
fn a_substitution_no_quoting_can_hold_is_refused_before_anything_runs() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "pipelines/inject.yaml",
        "pipeline: inject\nparams:\n  msg: hello\nnodes:\n  tick:\n    kind: command\n    outputs: [a.txt]\n    run: echo `echo {msg}` > \"$FRACFLOW_OUT/a.txt\"\n",
    );
    let output = sandbox.run(&["run", "inject"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let shown = text(&output);
    assert!(
        shown.contains(
            "`{msg}` cannot be substituted into this shell command: it stands inside backticks"
        ),
        "{shown}"
    );
    assert!(!sandbox.results("inject").exists(), "nothing may run");
}
