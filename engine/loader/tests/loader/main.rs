//! Loading valid pipelines: expansion over sweeps, dependency matching, variants, `base:`, `uses:`, templates,
//! discovery, the checked-in JSON schema, and expansion at scale; and, in `diagnostics`, the bad-input catalogue.
//! One test binary: with the real kind registry, each one links polars (through the executors).

mod diagnostics;

use std::path::{Path, PathBuf};
use std::time::Duration;

use fracflow_core::{NodeSpec, Resource};
use fracflow_loader::{Diagnostics, LoadOptions, Loaded, load, parse_only};
use serde_json::json;

/// A throwaway project: files written under a temporary root.
struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    fn new(files: &[(&str, &str)]) -> Project {
        let dir = tempfile::tempdir().expect("temporary directory");
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("files live in a directory"))
                .expect("create dirs");
            std::fs::write(path, text).expect("write file");
        }
        Project { dir }
    }

    fn root(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).expect("root exists")
    }

    fn opts(&self) -> LoadOptions {
        LoadOptions {
            root: self.dir.path().to_path_buf(),
            ..LoadOptions::default()
        }
    }

    fn try_load(&self, entry: &str, opts: &LoadOptions) -> Result<Loaded, Diagnostics> {
        load(
            Path::new(entry),
            opts,
            &fracflow_executors::Registry::builtin(),
        )
    }

    fn load_with(&self, entry: &str, opts: &LoadOptions) -> Loaded {
        match self.try_load(entry, opts) {
            Ok(loaded) => loaded,
            Err(diagnostics) => panic!("{entry} should load, but:\n{diagnostics}"),
        }
    }

    fn load(&self, entry: &str) -> Loaded {
        self.load_with(entry, &self.opts())
    }

    fn errors(&self, entry: &str, opts: &LoadOptions) -> String {
        match self.try_load(entry, opts) {
            Ok(_) => panic!("{entry} should not load"),
            Err(diagnostics) => diagnostics.to_string(),
        }
    }
}

fn one(files: &str) -> Project {
    Project::new(&[("pipelines/p.yaml", files)])
}

fn ids(loaded: &Loaded) -> Vec<&str> {
    loaded.graph.specs().map(|n| n.id.as_str()).collect()
}

fn ids_of<'a>(loaded: &'a Loaded, name: &str) -> Vec<&'a str> {
    loaded
        .graph
        .specs()
        .filter(|n| n.name == name)
        .map(|n| n.id.as_str())
        .collect()
}

fn spec<'a>(loaded: &'a Loaded, id: &str) -> &'a NodeSpec {
    loaded
        .graph
        .specs()
        .find(|n| n.id == id)
        .unwrap_or_else(|| panic!("no node `{id}` in {:?}", ids(loaded)))
}

fn deps<'a>(loaded: &'a Loaded, id: &str) -> Vec<&'a str> {
    spec(loaded, id).deps.iter().map(String::as_str).collect()
}

/// The `run` of the first node declared.
fn first_run(loaded: &Loaded) -> serde_json::Value {
    loaded
        .graph
        .specs()
        .next()
        .map(|n| n.config["run"].clone())
        .unwrap_or_else(|| panic!("no node"))
}

fn run<'a>(loaded: &'a Loaded, id: &str) -> &'a serde_json::Value {
    spec(loaded, id)
        .config
        .get("run")
        .unwrap_or_else(|| panic!("`{id}` has no run"))
}

mod expansion {
    use super::*;

    #[test]
    fn cartesian_product_is_first_key_outermost() {
        let p = one(
            "pipeline: p\nsweep: {m: [1024, 4096], k: [1, 2], n: [1, 4, 28]}\nnodes:\n  gen:\n    kind: command\n    foreach: [m, k, n]\n    run: echo {m} {k} {n}\n",
        );
        let loaded = p.load("pipelines/p.yaml");
        assert_eq!(
            ids(&loaded),
            [
                "gen[m=1024,k=1,n=1]",
                "gen[m=1024,k=1,n=4]",
                "gen[m=1024,k=1,n=28]",
                "gen[m=1024,k=2,n=1]",
                "gen[m=1024,k=2,n=4]",
                "gen[m=1024,k=2,n=28]",
                "gen[m=4096,k=1,n=1]",
                "gen[m=4096,k=1,n=4]",
                "gen[m=4096,k=1,n=28]",
                "gen[m=4096,k=2,n=1]",
                "gen[m=4096,k=2,n=4]",
                "gen[m=4096,k=2,n=28]",
            ]
        );
        assert_eq!(
            spec(&loaded, "gen[m=4096,k=2,n=28]").point,
            [("k", json!(2)), ("m", json!(4096)), ("n", json!(28))]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect()
        );
        assert_eq!(
            run(&loaded, "gen[m=4096,k=2,n=28]"),
            &json!("echo 4096 2 28")
        );
    }

    #[test]
    fn ids_follow_sweep_order_whatever_the_foreach_order() {
        let p = one(
            "pipeline: p\nsweep: {m: [1, 2], n: [a, b]}\nnodes:\n  gen:\n    kind: command\n    foreach: [n, m]\n    run: echo {m}{n}\n  one:\n    kind: command\n    foreach: [n]\n    run: echo {n}\n",
        );
        let loaded = p.load("pipelines/p.yaml");
        assert_eq!(
            ids_of(&loaded, "gen"),
            [
                "gen[m=1,n=a]",
                "gen[m=1,n=b]",
                "gen[m=2,n=a]",
                "gen[m=2,n=b]"
            ]
        );
        assert_eq!(ids_of(&loaded, "one"), ["one[n=a]", "one[n=b]"]);
        assert_eq!(spec(&loaded, "one[n=b]").point.get("n"), Some(&json!("b")));
    }

    #[test]
    fn exclude_rules_take_scalars_and_lists() {
        let p = one(
            "pipeline: p\nsweep: {k: [1, 2, 4], n: [1, 4, 28]}\nexclude:\n  - {k: [2, 4], n: 1}\n  - {k: 1, n: 28}\nnodes:\n  gen:\n    kind: command\n    foreach: [k, n]\n    run: echo {k} {n}\n",
        );
        let loaded = p.load("pipelines/p.yaml");
        assert_eq!(
            ids(&loaded),
            [
                "gen[k=1,n=1]",
                "gen[k=1,n=4]",
                "gen[k=2,n=4]",
                "gen[k=2,n=28]",
                "gen[k=4,n=4]",
                "gen[k=4,n=28]"
            ]
        );
    }

    #[test]
    fn only_filters_swept_values() {
        let p = one(
            "pipeline: p\nsweep: {m: [1024, 4096], n: [1, 4, 28]}\nnodes:\n  gen:\n    kind: command\n    foreach: [m, n]\n    run: echo {m} {n}\n",
        );
        let mut opts = p.opts();
        opts.only = vec![parse_only("n=28,1").expect("filter")];
        let loaded = p.load_with("pipelines/p.yaml", &opts);
        assert_eq!(
            ids(&loaded),
            [
                "gen[m=1024,n=1]",
                "gen[m=1024,n=28]",
                "gen[m=4096,n=1]",
                "gen[m=4096,n=28]"
            ]
        );
        opts.only.push(parse_only("m=4096").expect("filter"));
        let loaded = p.load_with("pipelines/p.yaml", &opts);
        assert_eq!(ids(&loaded), ["gen[m=4096,n=1]", "gen[m=4096,n=28]"]);
    }

    #[test]
    fn per_point_nodes_depend_on_the_matching_build_and_fan_in_takes_all_matching() {
        let p = one(r#"pipeline: p
sweep: {m: [1024, 4096], n: [1, 4]}
targets:
  fig16: [plot]
  builds: [build]
nodes:
  setup:
    kind: command
    run: echo setup
  build:
    kind: command
    foreach: [m]
    deps: [setup]
    run: make M={m}
  measure:
    kind: command
    foreach: [m, n]
    deps: [build]
    run: ./measure {m} {n}
  per_m:
    kind: command
    foreach: [m]
    deps: [measure]
    run: ./aggregate {m}
  per_n:
    kind: command
    foreach: [n]
    deps: [measure]
    run: ./aggregate {n}
  plot:
    kind: group
    deps: [per_m, per_n]
"#);
        let loaded = p.load("pipelines/p.yaml");
        assert_eq!(deps(&loaded, "build[m=1024]"), ["setup"]);
        assert_eq!(deps(&loaded, "measure[m=4096,n=1]"), ["build[m=4096]"]);
        assert_eq!(
            deps(&loaded, "per_m[m=1024]"),
            ["measure[m=1024,n=1]", "measure[m=1024,n=4]"]
        );
        assert_eq!(
            deps(&loaded, "per_n[n=4]"),
            ["measure[m=1024,n=4]", "measure[m=4096,n=4]"]
        );
        assert_eq!(
            deps(&loaded, "plot"),
            ["per_m[m=1024]", "per_m[m=4096]", "per_n[n=1]", "per_n[n=4]"]
        );
        assert_eq!(loaded.pipeline.targets["fig16"], ["plot"]);
        assert_eq!(
            loaded.pipeline.targets["builds"],
            ["build[m=1024]", "build[m=4096]"]
        );
        // The graph holds the nodes (moved there, not copied) and orders them with dependencies first.
        assert!(loaded.pipeline.nodes.is_empty());
        assert_eq!(loaded.graph.specs().count(), loaded.graph.len());
        let order: Vec<&str> = loaded
            .graph
            .topological()
            .iter()
            .map(|&i| loaded.graph.spec(i).id.as_str())
            .collect();
        let at = |id: &str| order.iter().position(|o| *o == id).expect("in order");
        assert!(at("setup") < at("build[m=1024]"));
        assert!(at("measure[m=1024,n=4]") < at("per_n[n=4]"));
        assert!(at("per_n[n=4]") < at("plot"));
    }

    #[test]
    fn node_spec_fields_are_resolved() {
        let p = Project::new(&[
            ("scripts/gen.py", "print(1)\n"),
            ("hw/top_k/a.cpp", "a\n"),
            ("hw/top_k/b.cpp", "b\n"),
            ("hw/top_k/notes.txt", "n\n"),
            (
                "pipelines/p.yaml",
                r#"pipeline: p
description: all the fields
sweep: {m: [1024]}
nodes:
  gen:
    kind: command
    description: makes data
    foreach: [m]
    inputs: [scripts/gen.py, "hw/top_k/*.cpp", scripts/gen.py]
    outputs: ["data_{m}.bin", logs/run.txt]
    resources: ["device:fpga0", "cores:2", "host:bench{m}"]
    retries: 2
    timeout: 5m
    estimate: 1.5
    params: {half: "{m // 2}"}
    run: python3 scripts/gen.py {half} > $FRACFLOW_OUT/data_{m}.bin
    env: {RATE: "{m}", FIXED: 7}
    cwd: scripts
    metrics: {tps: {regex: 'tps=(\d+)'}, p50: {json: latency.p50}}
    success_codes: [0, 3]
"#,
            ),
        ]);
        let loaded = p.load("pipelines/p.yaml");
        let root = p.root();
        let node = spec(&loaded, "gen[m=1024]");
        assert_eq!(node.name, "gen");
        assert_eq!(node.kind, "command");
        assert_eq!(
            node.inputs,
            [
                root.join("scripts/gen.py"),
                root.join("hw/top_k/a.cpp"),
                root.join("hw/top_k/b.cpp")
            ]
        );
        assert!(node.inputs.iter().all(|p| p.is_absolute()));
        // A node with `metrics` also writes metrics.json: the loader adds it so the cache keeps it.
        assert_eq!(
            node.outputs,
            ["data_1024.bin", "logs/run.txt", "metrics.json"]
        );
        assert_eq!(
            node.resources,
            [
                Resource::Device("fpga0".into()),
                Resource::Cores(2),
                Resource::Host("bench1024".into())
            ]
        );
        assert_eq!(node.retries, 2);
        assert_eq!(node.timeout, Some(Duration::from_secs(300)));
        assert_eq!(node.estimate, Some(Duration::from_millis(1500)));
        assert_eq!(node.origin.file, Path::new("pipelines/p.yaml"));
        assert_eq!((node.origin.line, node.origin.column), (5, 3));
        assert_eq!(
            node.config["run"],
            json!("python3 scripts/gen.py 512 > $FRACFLOW_OUT/data_1024.bin")
        );
        // As written, resolved: the kind reads `7` as the text `7` (its config type says so).
        assert_eq!(node.config["env"], json!({"RATE": "1024", "FIXED": 7}));
        assert_eq!(node.config["cwd"], json!("scripts"));
        assert_eq!(
            node.config["metrics"],
            json!({"tps": {"regex": "tps=(\\d+)"}, "p50": {"json": "latency.p50"}})
        );
        assert_eq!(node.config["success_codes"], json!([0, 3]));
        // Node params fill templates; they are not part of the kind's config.
        assert!(!node.config.contains_key("params"), "{:?}", node.config);
        assert_eq!(loaded.pipeline.name, "p");
        assert_eq!(loaded.pipeline.root, root);
        assert_eq!(loaded.pipeline.sources, [root.join("pipelines/p.yaml")]);
    }

    #[test]
    fn an_unswept_pipeline_has_one_instance_per_node() {
        let p = one(
            "pipeline: p\nnodes:\n  a:\n    kind: command\n    run: [echo, a]\n  b:\n    kind: group\n    deps: [a]\n",
        );
        let loaded = p.load("pipelines/p.yaml");
        assert_eq!(ids(&loaded), ["a", "b"]);
        assert_eq!(run(&loaded, "a"), &json!(["echo", "a"]));
        assert_eq!(deps(&loaded, "b"), ["a"]);
        assert!(spec(&loaded, "b").config.is_empty());
        assert!(spec(&loaded, "a").point.is_empty());
    }

    #[test]
    fn metrics_take_a_match_and_a_base_and_labels_and_require_are_templates() {
        let p = one(r#"pipeline: p
params: {len_base: 16}
sweep: {bench: [3]}
nodes:
  run:
    kind: command
    foreach: [bench]
    run: ./serialize_co
    require: ['BENCH {bench} #']
    labels: {design: memory-affinity, bench_name: "bench{bench}"}
    metrics:
      sw_us: {regex: 'timeing: (\S+) us', match: 1}
      total_us: {regex: 'timeing: (\S+) us', match: -1, base: auto}
      len: {regex: 'host_serialized_len = (\S+)', base: "{len_base}"}
      p50: {json: $.p50}
  plain:
    kind: command
    run: ./other
"#);
        let loaded = p.load("pipelines/p.yaml");
        let node = spec(&loaded, "run[bench=3]");
        assert_eq!(
            node.config["metrics"],
            json!({
                "sw_us": {"regex": "timeing: (\\S+) us", "match": 1},
                "total_us": {"regex": "timeing: (\\S+) us", "match": -1, "base": "auto"},
                "len": {"regex": "host_serialized_len = (\\S+)", "base": "16"},
                "p50": {"json": "$.p50"},
            })
        );
        assert_eq!(node.config["require"], json!(["BENCH 3 #"]));
        assert_eq!(
            node.config["labels"],
            json!({"design": "memory-affinity", "bench_name": "bench3"})
        );
        assert_eq!(node.outputs, ["metrics.json"]);
        assert!(spec(&loaded, "plain").outputs.is_empty());
    }

    #[test]
    fn metric_keys_that_do_not_combine_are_errors() {
        for (metric, expected) in [
            ("{regex: 'a', json: b}", "`regex` or `json`, not both"),
            ("{match: 2}", "needs `regex` or `json`"),
            ("{json: $.a, base: 16}", "apply to `regex` metrics only"),
            ("{regex: 'a', match: 0}", "counts matches from 1"),
            ("{regex: 'a', base: 8}", "10, 16 or auto"),
        ] {
            let p = one(&format!(
                "pipeline: p\nnodes:\n  a:\n    kind: command\n    run: ./a\n    metrics:\n      m: {metric}\n"
            ));
            let errors = p.errors("pipelines/p.yaml", &p.opts());
            assert!(
                errors.contains(expected) && errors.contains("metrics.m"),
                "{metric}: {errors}"
            );
        }
    }

    #[test]
    fn an_unswept_node_exists_even_when_every_point_is_excluded() {
        let p = one(
            "pipeline: p\nsweep: {n: [1]}\nexclude: [{n: 1}]\nnodes:\n  a:\n    kind: command\n    foreach: [n]\n    run: echo {n}\n  all:\n    kind: group\n    deps: [a]\n",
        );
        let loaded = p.load("pipelines/p.yaml");
        assert_eq!(ids(&loaded), ["all"]);
        assert!(deps(&loaded, "all").is_empty());
    }
}

mod documents {
    use super::*;

    const WITH_VARIANTS: &str = r#"pipeline: p
params: {d: 30, label: full}
sweep: {m: [1024, 4096], n: [1, 4, 28]}
variants:
  smoke: {sweep: {n: [1, 4]}, params: {d: 5}}
  tiny:
    sweep: {m: [8]}
    nodes:
      gen: {retries: 3}
nodes:
  gen:
    kind: command
    foreach: [m, n]
    run: echo {m} {n} {d} {label}
"#;

    #[test]
    fn a_variant_is_laid_over_the_document() {
        let p = one(WITH_VARIANTS);
        let mut opts = p.opts();
        let full = p.load_with("pipelines/p.yaml", &opts);
        assert_eq!(full.graph.len(), 6);
        opts.variant = Some("smoke".to_owned());
        let smoke = p.load_with("pipelines/p.yaml", &opts);
        assert_eq!(
            ids(&smoke),
            [
                "gen[m=1024,n=1]",
                "gen[m=1024,n=4]",
                "gen[m=4096,n=1]",
                "gen[m=4096,n=4]"
            ]
        );
        assert_eq!(run(&smoke, "gen[m=4096,n=4]"), &json!("echo 4096 4 5 full"));
        opts.variant = Some("tiny".to_owned());
        let tiny = p.load_with("pipelines/p.yaml", &opts);
        assert_eq!(
            ids(&tiny),
            ["gen[m=8,n=1]", "gen[m=8,n=4]", "gen[m=8,n=28]"]
        );
        assert_eq!(spec(&tiny, "gen[m=8,n=1]").retries, 3);
        assert_eq!(run(&tiny, "gen[m=8,n=1]"), &json!("echo 8 1 30 full"));
    }

    #[test]
    fn an_unknown_variant_is_an_error_with_a_suggestion() {
        let p = one(WITH_VARIANTS);
        let mut opts = p.opts();
        opts.variant = Some("smok".to_owned());
        let text = p.errors("pipelines/p.yaml", &opts);
        assert!(text.contains("unknown variant `smok`"), "{text}");
        assert!(text.contains("did you mean `smoke`?"), "{text}");
    }

    #[test]
    fn base_documents_merge_deeply_in_a_chain() {
        let p = Project::new(&[
            (
                "pipelines/common/root.yaml",
                "params: {d: 30, e: 1}\nsweep: {n: [1, 4]}\ntargets: {all: [gen]}\nnodes:\n  gen:\n    kind: command\n    foreach: [n]\n    run: echo {n} {d} {e}\n    env: {A: a, B: b}\n",
            ),
            (
                "pipelines/common/mid.yaml",
                "base: root.yaml\nparams: {e: 2}\nnodes:\n  gen:\n    env: {B: mid}\n",
            ),
            (
                "pipelines/p.yaml",
                "pipeline: p\nbase: common/mid.yaml\nparams: {d: 5}\nnodes:\n  gen:\n    retries: 1\n  extra:\n    kind: group\n    deps: [gen]\n",
            ),
        ]);
        let loaded = p.load("pipelines/p.yaml");
        assert_eq!(ids(&loaded), ["gen[n=1]", "gen[n=4]", "extra"]);
        let node = spec(&loaded, "gen[n=4]");
        assert_eq!(node.config["run"], json!("echo 4 5 2"));
        assert_eq!(node.config["env"], json!({"A": "a", "B": "mid"}));
        assert_eq!(node.retries, 1);
        // Nodes from the base keep their origin in the base file.
        assert_eq!(node.origin.file, Path::new("pipelines/common/root.yaml"));
        assert_eq!(loaded.pipeline.targets["all"], ["gen[n=1]", "gen[n=4]"]);
        let root = p.root();
        assert_eq!(
            loaded.pipeline.sources,
            [
                root.join("pipelines/p.yaml"),
                root.join("pipelines/common/mid.yaml"),
                root.join("pipelines/common/root.yaml")
            ]
        );
    }

    #[test]
    fn an_empty_mapping_in_the_overlay_replaces() {
        let p = Project::new(&[
            (
                "pipelines/base.yaml",
                "sweep: {n: [1, 4]}\nnodes:\n  gen:\n    kind: command\n    run: echo hi\n    env: {A: a}\n    params: {x: 1}\n",
            ),
            (
                "pipelines/p.yaml",
                "pipeline: p\nbase: base.yaml\nsweep: {}\nnodes:\n  gen:\n    env: {}\n",
            ),
        ]);
        let loaded = p.load("pipelines/p.yaml");
        let node = spec(&loaded, "gen");
        assert_eq!(node.config["env"], json!({}), "{:?}", node.config);
    }

    #[test]
    fn a_base_cycle_names_the_chain() {
        let p = Project::new(&[
            ("pipelines/a.yaml", "pipeline: a\nbase: b.yaml\n"),
            ("pipelines/b.yaml", "base: c.yaml\n"),
            ("pipelines/c.yaml", "base: a.yaml\n"),
        ]);
        let text = p.errors("pipelines/a.yaml", &p.opts());
        assert!(
            text.contains("`base:` files form a cycle: pipelines/a.yaml -> pipelines/b.yaml -> pipelines/c.yaml -> pipelines/a.yaml"),
            "{text}"
        );
        assert!(text.contains("--> pipelines/c.yaml:1:7"), "{text}");
    }

    #[test]
    fn uses_imports_nodes_and_param_defaults() {
        let p = Project::new(&[
            (
                "pipelines/sets/build.yaml",
                "uses: [tools.yaml]\nparams: {m: 4096, d: 1}\nnodes:\n  build:\n    kind: command\n    deps: [tools]\n    run: make M={m} D={d}\n",
            ),
            (
                "pipelines/sets/tools.yaml",
                "nodes:\n  tools:\n    kind: command\n    run: make tools\n",
            ),
            (
                "pipelines/sets/other.yaml",
                "uses: [tools.yaml]\nnodes:\n  other:\n    kind: group\n    deps: [tools]\n",
            ),
            (
                "pipelines/p.yaml",
                "pipeline: p\nuses: [sets/build.yaml, sets/other.yaml]\nparams: {d: 9}\nsweep: {n: [1, 2]}\nnodes:\n  use:\n    kind: group\n    deps: [build, other]\n",
            ),
        ]);
        let loaded = p.load("pipelines/p.yaml");
        // Imported nodes come first (depth first, each file once), then the pipeline's own.
        assert_eq!(ids(&loaded), ["tools", "build", "other", "use"]);
        // The pipeline's param wins over the node set's default.
        assert_eq!(run(&loaded, "build"), &json!("make M=4096 D=9"));
        assert_eq!(deps(&loaded, "build"), ["tools"]);
        assert_eq!(deps(&loaded, "use"), ["build", "other"]);
    }

    #[test]
    fn a_node_set_default_gives_way_to_a_sweep_key() {
        let p = Project::new(&[
            (
                "pipelines/set.yaml",
                "params: {m: 4096}\nnodes:\n  build:\n    kind: command\n    run: make M={m}\n",
            ),
            (
                "pipelines/p.yaml",
                "pipeline: p\nuses: [set.yaml]\nsweep: {m: [1, 2]}\nnodes:\n  again:\n    kind: command\n    foreach: [m]\n    run: make {m}\n",
            ),
        ]);
        let text = p.errors("pipelines/p.yaml", &p.opts());
        assert!(
            text.contains("node `build` uses swept key `m` but is not expanded over it"),
            "{text}"
        );
    }

    #[test]
    fn a_node_set_default_is_used_when_not_swept() {
        let p = Project::new(&[
            (
                "pipelines/set.yaml",
                "params: {m: 4096}\nnodes:\n  build:\n    kind: command\n    run: make M={m}\n",
            ),
            ("pipelines/p.yaml", "pipeline: p\nuses: [set.yaml]\n"),
        ]);
        let loaded = p.load("pipelines/p.yaml");
        assert_eq!(run(&loaded, "build"), &json!("make M=4096"));
        let root = p.root();
        assert_eq!(
            loaded.pipeline.sources,
            [
                root.join("pipelines/p.yaml"),
                root.join("pipelines/set.yaml")
            ]
        );
    }
}

mod local_axes {
    use super::*;

    #[test]
    fn a_mapping_foreach_mixes_sweep_keys_and_local_axes_in_the_order_written() {
        let p = one(r#"pipeline: p
sweep: {m: [1024, 4096], n: [1, 4]}
exclude: [{m: 4096, n: 4}]
nodes:
  gen:
    kind: command
    foreach: {unit: [top_k, log], m: sweep}
    params: {dir: "hw/{unit}"}
    run: build {unit} {m} {dir}
  swapped:
    kind: command
    foreach: {n: sweep, m: sweep}
    run: echo {m} {n}
  local:
    kind: command
    foreach: {unit: [top_k, log], level: [1, 2]}
    run: echo {unit} {level * 10}
"#);
        let loaded = p.load("pipelines/p.yaml");
        assert_eq!(
            ids_of(&loaded, "gen"),
            [
                "gen[unit=top_k,m=1024]",
                "gen[unit=top_k,m=4096]",
                "gen[unit=log,m=1024]",
                "gen[unit=log,m=4096]"
            ]
        );
        assert_eq!(
            run(&loaded, "gen[unit=log,m=4096]"),
            &json!("build log 4096 hw/log")
        );
        assert_eq!(
            spec(&loaded, "gen[unit=log,m=4096]").point,
            [("m", json!(4096)), ("unit", json!("log"))]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect()
        );
        // Sweep keys written out of sweep order: the ids follow the mapping; excluded points stay out.
        assert_eq!(
            ids_of(&loaded, "swapped"),
            [
                "swapped[n=1,m=1024]",
                "swapped[n=1,m=4096]",
                "swapped[n=4,m=1024]"
            ]
        );
        assert_eq!(
            ids_of(&loaded, "local"),
            [
                "local[unit=top_k,level=1]",
                "local[unit=top_k,level=2]",
                "local[unit=log,level=1]",
                "local[unit=log,level=2]"
            ]
        );
        assert_eq!(
            run(&loaded, "local[unit=log,level=2]"),
            &json!("echo log 20")
        );
        assert_eq!(
            spec(&loaded, "local[unit=log,level=2]").point["level"],
            json!(2)
        );
    }

    #[test]
    fn dependencies_match_on_local_axes_by_value() {
        let p = one(r#"pipeline: p
sweep: {m: [1, 2]}
nodes:
  build:
    kind: command
    foreach: {unit: [a, b, c]}
    run: make {unit}
  per_unit:
    kind: command
    foreach: {unit: [c, a]}
    deps: [build]
    run: use {unit}
  per_point:
    kind: command
    foreach: {m: sweep, unit: [a, c]}
    deps: [per_unit, build]
    run: run {m} {unit}
  fan_in:
    kind: group
    deps: [build]
  per_m:
    kind: command
    foreach: [m]
    deps: [per_point]
    run: plot {m}
"#);
        let loaded = p.load("pipelines/p.yaml");
        assert_eq!(
            ids_of(&loaded, "per_unit"),
            ["per_unit[unit=c]", "per_unit[unit=a]"]
        );
        assert_eq!(deps(&loaded, "per_unit[unit=c]"), ["build[unit=c]"]);
        assert_eq!(
            deps(&loaded, "fan_in"),
            ["build[unit=a]", "build[unit=b]", "build[unit=c]"]
        );
        assert_eq!(
            deps(&loaded, "per_point[m=1,unit=c]"),
            ["per_unit[unit=c]", "build[unit=c]"]
        );
        assert_eq!(
            deps(&loaded, "per_m[m=2]"),
            ["per_point[m=2,unit=a]", "per_point[m=2,unit=c]"]
        );
        // `per_unit` has no `unit=b`: that instance is an error, reported once with the value.
        let p = one(r#"pipeline: p
nodes:
  build:
    kind: command
    foreach: {unit: [a, b]}
    run: make {unit}
  use:
    kind: command
    foreach: {unit: [a, b, c, d]}
    deps: [build]
    run: use {unit}
"#);
        let text = p.errors("pipelines/p.yaml", &p.opts());
        assert!(
            text.contains("error: node `use` depends on `build`, which has no instance with unit=c (instance `use[unit=c]`)"),
            "{text}"
        );
        assert!(text.contains("--> pipelines/p.yaml:10:12"), "{text}");
        assert_eq!(text.matches("error: ").count(), 2, "{text}");
    }

    #[test]
    fn a_local_axis_hides_a_param_of_its_name_and_only_filters_sweep_keys() {
        let p = one(r#"pipeline: p
params: {unit: none, label: "u-{n}"}
sweep: {n: [1, 2]}
nodes:
  gen:
    kind: command
    foreach: {unit: [a, b], n: sweep}
    run: echo {unit} {label}
  other:
    kind: command
    run: echo {unit}
"#);
        let mut opts = p.opts();
        opts.only = vec![parse_only("n=2").expect("filter")];
        let loaded = p.load_with("pipelines/p.yaml", &opts);
        assert_eq!(
            ids_of(&loaded, "gen"),
            ["gen[unit=a,n=2]", "gen[unit=b,n=2]"]
        );
        assert_eq!(run(&loaded, "gen[unit=b,n=2]"), &json!("echo b u-2"));
        assert_eq!(run(&loaded, "other"), &json!("echo none"));
        opts.only = vec![parse_only("unit=a").expect("filter")];
        let text = p.errors("pipelines/p.yaml", &opts);
        assert!(
            text.contains("`--only unit=a`: `unit` is not a sweep key"),
            "{text}"
        );
    }

    #[test]
    fn a_node_with_only_local_axes_exists_when_every_point_is_excluded() {
        let p = one(
            "pipeline: p\nsweep: {n: [1]}\nexclude: [{n: 1}]\nnodes:\n  a:\n    kind: command\n    foreach: {u: [x, y]}\n    run: echo {u}\n  b:\n    kind: command\n    foreach: {u: [x], n: sweep}\n    run: echo {u} {n}\n",
        );
        let loaded = p.load("pipelines/p.yaml");
        assert_eq!(ids(&loaded), ["a[u=x]", "a[u=y]"]);
    }
}

mod fpga {
    use super::*;

    const BUILD_SET: &str = r#"# The shared FPGA build chain, as figure pipelines import it.
params: {device: "127.0.0.1:7000"}
nodes:
  hls:
    kind: hls
    foreach: {unit: [top_k, log]}
    inputs: ["hw/accelerators/{unit}/*", hw/accelerators/frac_kernel.h]
    outputs: [plugin.so, unit.json]
    unit: "{unit}"
  weave:
    kind: weave
    inputs: [hw/shell.yaml, "hw/accelerators/*/unit.yaml"]
    outputs: [design.json]
  partials:
    kind: partials
    foreach: {unit: [top_k, log]}
    deps: [weave, hls]
    outputs: [icap/]
    unit: "{unit}"
  image:
    kind: image
    deps: [weave, hls]
    outputs: [jtag/frac.bit]
  program:
    kind: program
    deps: [image]
    resources: ["device:fpga0"]
    addr: "{device}"
"#;

    const PIPELINE: &str = r#"pipeline: fig
uses: [common/build.yaml]
sweep: {m: [1024, 4096]}
nodes:
  load:
    kind: load
    foreach: {m: sweep, slot: [0, 2]}
    deps: [program, partials]
    resources: ["device:fpga0"]
    slot: "{slot}"
    partial: "c0{slot}_f00.bin"
    addr: "{device}"
    chunk_size: 128
    hbm_addr: 0x10008000
  load_defaults:
    kind: load
    deps: [partials]
    slot: 3
    partial: c03_f15.bin
    addr: "localhost:7001"
  hls_real:
    kind: hls
    unit: cnn
    compiler: clang++
    tool: vitis_hls
    part: xcu280-fsvh2892-2L-e
  weave_spinhdl:
    kind: weave
    shell: hw/shell.yaml
    units: hw/accelerators
    tool: spinhdl
  bypass:
    kind: image
    bypass: true
    outputs: [bypass/frac.bit]
  program_file:
    kind: program
    image: bitstreams/frac.bit
    addr: "10.0.0.2:7000"
"#;

    fn project() -> Project {
        Project::new(&[
            ("hw/shell.yaml", "name: frac\n"),
            ("hw/accelerators/frac_kernel.h", "// abi\n"),
            ("hw/accelerators/top_k/top_k.cpp", "// top_k\n"),
            ("hw/accelerators/top_k/unit.yaml", "name: top_k\n"),
            ("hw/accelerators/log/log.cpp", "// log\n"),
            ("hw/accelerators/log/unit.yaml", "name: log\n"),
            ("hw/accelerators/cnn/cnn.cpp", "// cnn\n"),
            ("hw/accelerators/cnn/unit.yaml", "name: cnn\n"),
            ("bitstreams/frac.bit", "bits"),
            ("pipelines/common/build.yaml", BUILD_SET),
            ("pipelines/fig.yaml", PIPELINE),
        ])
    }

    fn config(loaded: &Loaded, id: &str) -> serde_json::Value {
        json!(spec(loaded, id).config)
    }

    #[test]
    fn the_build_and_device_chain_expands_with_local_axes() {
        let p = project();
        let loaded = p.load("pipelines/fig.yaml");
        assert_eq!(
            ids(&loaded),
            [
                "hls[unit=top_k]",
                "hls[unit=log]",
                "weave",
                "partials[unit=top_k]",
                "partials[unit=log]",
                "image",
                "program",
                "load[m=1024,slot=0]",
                "load[m=1024,slot=2]",
                "load[m=4096,slot=0]",
                "load[m=4096,slot=2]",
                "load_defaults",
                "hls_real",
                "weave_spinhdl",
                "bypass",
                "program_file",
            ]
        );
        // Per unit: the matching hls; the full image: all of them.
        assert_eq!(
            deps(&loaded, "partials[unit=log]"),
            ["weave", "hls[unit=log]"]
        );
        assert_eq!(
            deps(&loaded, "image"),
            ["weave", "hls[unit=top_k]", "hls[unit=log]"]
        );
        assert_eq!(deps(&loaded, "program"), ["image"]);
        assert_eq!(
            deps(&loaded, "load[m=4096,slot=2]"),
            ["program", "partials[unit=top_k]", "partials[unit=log]"]
        );

        let root = p.root();
        let hls = spec(&loaded, "hls[unit=log]");
        assert_eq!(hls.kind, "hls");
        assert_eq!(
            hls.inputs,
            [
                root.join("hw/accelerators/log/log.cpp"),
                root.join("hw/accelerators/log/unit.yaml"),
                root.join("hw/accelerators/frac_kernel.h")
            ]
        );
        assert_eq!(
            hls.point,
            [("unit".to_owned(), json!("log"))].into_iter().collect()
        );
        // The config is the node's keys as written, resolved; the kind's typed config fills in the defaults.
        use fracflow_executors::config::parse;
        use fracflow_executors::fpga::{
            HlsConfig, HlsTool, LoadConfig, ProgramConfig, WeaveConfig, WeaveTool,
        };
        let typed = |id: &str| spec(&loaded, id);
        assert_eq!(config(&loaded, "hls[unit=log]"), json!({"unit": "log"}));
        let hls = parse::<HlsConfig>(typed("hls[unit=log]")).expect("hls");
        assert_eq!((hls.unit.0.as_str(), hls.tool), ("log", HlsTool::Emulated));
        let real = parse::<HlsConfig>(typed("hls_real")).expect("hls_real");
        assert_eq!(
            (real.compiler.as_deref(), real.tool, real.part.as_deref()),
            (
                Some("clang++"),
                HlsTool::VitisHls,
                Some("xcu280-fsvh2892-2L-e")
            )
        );
        let weave = parse::<WeaveConfig>(typed("weave")).expect("weave");
        assert_eq!(
            (weave.shell.as_str(), weave.units.as_str(), weave.tool),
            ("hw/shell.yaml", "hw/accelerators", WeaveTool::Emulated)
        );
        assert_eq!(config(&loaded, "weave_spinhdl")["tool"], json!("spinhdl"));
        assert_eq!(
            config(&loaded, "partials[unit=top_k]"),
            json!({"unit": "top_k"})
        );
        assert_eq!(spec(&loaded, "partials[unit=top_k]").outputs, ["icap/"]);
        assert_eq!(config(&loaded, "bypass"), json!({"bypass": true}));
        let program = parse::<ProgramConfig>(typed("program")).expect("program");
        assert_eq!(
            (program.addr.0.as_str(), program.image),
            ("127.0.0.1:7000", None)
        );
        let file = parse::<ProgramConfig>(typed("program_file")).expect("program_file");
        assert_eq!(file.image.as_deref(), Some("bitstreams/frac.bit"));
        let load = parse::<LoadConfig>(typed("load[m=1024,slot=2]")).expect("load");
        assert_eq!(
            (
                load.slot.0,
                load.partial.0.as_str(),
                load.chunk_size.0,
                load.hbm_addr.0
            ),
            (2, "c02_f00.bin", 128, 0x1000_8000)
        );
        let defaults = parse::<LoadConfig>(typed("load_defaults")).expect("load_defaults");
        assert_eq!(
            (
                defaults.slot.0,
                defaults.addr.0.as_str(),
                defaults.chunk_size.0,
                defaults.hbm_addr.0
            ),
            (3, "localhost:7001", 256, 0x1000_4000)
        );
    }

    #[test]
    fn templated_device_values_are_checked_per_instance() {
        let p = project();
        let mut opts = p.opts();
        opts.set.insert("device".to_owned(), json!("nowhere"));
        let text = p.errors("pipelines/fig.yaml", &opts);
        assert!(
            text.contains("error: invalid `addr` in node `program`: expected a device address `HOST:PORT` (e.g. `127.0.0.1:7000`), found `nowhere`"),
            "{text}"
        );
        assert!(
            text.contains("--> pipelines/common/build.yaml:28:11"),
            "{text}"
        );
        // `hbm_addr` as a string: hexadecimal or an integer expression.
        let p = one(
            "pipeline: p\nparams: {base: 268451840}\nnodes:\n  a:\n    kind: load\n    slot: \"{1 + 1}\"\n    partial: x.bin\n    addr: \"h:1\"\n    hbm_addr: \"{base} + 64\"\n  b:\n    kind: load\n    slot: 0\n    partial: x.bin\n    addr: \"h:1\"\n    hbm_addr: \"0x1000_0000\"\n",
        );
        let loaded = p.load("pipelines/p.yaml");
        // Resolved text, which the kind has checked (and reads as 268451904, 2 and 0x10000000).
        assert_eq!(
            spec(&loaded, "a").config["hbm_addr"],
            json!("268451840 + 64")
        );
        assert_eq!(spec(&loaded, "a").config["slot"], json!("2"));
        assert_eq!(spec(&loaded, "b").config["hbm_addr"], json!("0x1000_0000"));
    }

    #[test]
    fn directory_outputs_are_allowed_inside_the_output_directory() {
        let p = one(
            "pipeline: p\nnodes:\n  a:\n    kind: command\n    outputs: [icap/, logs/run/, out.txt]\n    run: make\n  b:\n    kind: command\n    outputs: [../up/, /abs/]\n    run: make\n",
        );
        let text = p.errors("pipelines/p.yaml", &p.opts());
        assert!(
            text.contains("output `../up/` of node `b` must be a relative path"),
            "{text}"
        );
        assert!(
            text.contains("output `/abs/` of node `b` must be a relative path"),
            "{text}"
        );
        assert_eq!(text.matches("error: ").count(), 2, "{text}");
    }
}

mod templates {
    use super::*;

    #[test]
    fn arithmetic_and_whole_string_integer_params() {
        let p = one(r#"pipeline: p
params:
  X: 1024
  Y: "{X} - 64"
  Z: "({Y} + 64) // 4"
  name: "run-{X}"
  quoted: "12"
sweep: {n: [1, 4], k: [2]}
nodes:
  gen:
    kind: command
    foreach: [n, k]
    params: {per: "{X // n}"}
    run: "gen --y {Y} --z {Z} --per {per} --mod {-7 % 3} --neg {-(n - 10)} {name} {quoted * 2} ${{HOME}} {{literal}} $FRACFLOW_OUT"
"#);
        let loaded = p.load("pipelines/p.yaml");
        assert_eq!(
            run(&loaded, "gen[n=4,k=2]"),
            &json!(
                "gen --y 960 --z 256 --per 256 --mod 2 --neg 6 run-1024 24 ${HOME} {literal} $FRACFLOW_OUT"
            )
        );
        assert!(!spec(&loaded, "gen[n=1,k=2]").config.contains_key("params"));
    }

    #[test]
    fn set_overrides_a_param_last() {
        let p = one(
            "pipeline: p\nparams: {d: 30, label: x}\nvariants:\n  smoke: {params: {d: 5}}\nnodes:\n  gen:\n    kind: command\n    run: echo {d} {label}\n",
        );
        let mut opts = p.opts();
        opts.variant = Some("smoke".to_owned());
        opts.set.insert("d".to_owned(), json!(7));
        opts.set.insert("label".to_owned(), json!("{d} * 2"));
        let loaded = p.load_with("pipelines/p.yaml", &opts);
        assert_eq!(run(&loaded, "gen"), &json!("echo 7 14"));
    }

    #[test]
    fn templates_apply_to_inputs_outputs_and_resources() {
        let p = Project::new(&[
            ("data/in_1.txt", "1"),
            ("data/in_2.txt", "2"),
            (
                "pipelines/p.yaml",
                "pipeline: p\nsweep: {i: [1, 2]}\nnodes:\n  gen:\n    kind: command\n    foreach: [i]\n    inputs: [\"data/in_{i}.txt\"]\n    outputs: [\"out_{i}.txt\"]\n    resources: [\"device:fpga{i - 1}\"]\n    timeout: \"{i * 10}s\"\n    run: cat data/in_{i}.txt\n",
            ),
        ]);
        let loaded = p.load("pipelines/p.yaml");
        let second = spec(&loaded, "gen[i=2]");
        assert_eq!(second.inputs, [p.root().join("data/in_2.txt")]);
        assert_eq!(second.outputs, ["out_2.txt"]);
        assert_eq!(second.resources, [Resource::Device("fpga1".into())]);
        assert_eq!(second.timeout, Some(Duration::from_secs(20)));
    }

    #[test]
    fn errors_repeated_across_instances_are_reported_once() {
        let p = one(
            "pipeline: p\nsweep: {k: [0, 1, 2]}\nparams: {z: 0}\nnodes:\n  gen:\n    kind: command\n    foreach: [k]\n    run: echo {k // z}\n",
        );
        let text = p.errors("pipelines/p.yaml", &p.opts());
        assert_eq!(text.matches("error: ").count(), 1, "{text}");
        assert!(
            text.contains("division by zero in `{k // z}` (instance `gen[k=0]`)"),
            "{text}"
        );
        assert!(
            text.contains("= note: the same error occurs in 2 more instances"),
            "{text}"
        );
    }
}

mod discovery {
    use super::*;
    use fracflow_loader::discover;

    #[test]
    fn finds_pipelines_skips_node_sets_and_survives_broken_files() {
        let p = Project::new(&[
            (
                "pipelines/demo.yaml",
                "pipeline: demo\ndescription: the demo\ntargets: {fig16: [gen]}\nnodes: {}\n",
            ),
            (
                "pipelines/frac/fig17.yaml",
                "pipeline: fig17\nbase: ../demo.yaml\ntargets: {fig17: [gen]}\n",
            ),
            ("pipelines/common/set.yaml", "nodes: {}\n"),
            ("pipelines/broken.yaml", "pipeline: [oops\n"),
            (
                "pipelines/lost.yaml",
                "pipeline: lost\nbase: nowhere.yaml\n",
            ),
            ("pipelines/notes.txt", "not yaml"),
        ]);
        let found = discover(p.dir.path());
        let names: Vec<&str> = found.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["broken", "demo", "fig17", "lost"]);
        let demo = &found[1];
        assert_eq!(demo.path, p.root().join("pipelines/demo.yaml"));
        assert_eq!(demo.description.as_deref(), Some("the demo"));
        assert_eq!(demo.targets, ["fig16"]);
        assert!(demo.problems.is_none());
        assert_eq!(found[2].targets, ["fig16", "fig17"]);
        assert_eq!(found[2].description.as_deref(), Some("the demo"));
        let broken = found[0]
            .problems
            .as_ref()
            .expect("broken file has problems")
            .to_string();
        assert!(broken.contains("--> pipelines/broken.yaml:"), "{broken}");
        let lost = found[3]
            .problems
            .as_ref()
            .expect("missing base is a problem")
            .to_string();
        assert!(
            lost.contains("cannot read `pipelines/nowhere.yaml`"),
            "{lost}"
        );
    }

    #[test]
    fn a_project_without_pipelines_has_none() {
        let p = Project::new(&[("README.md", "x")]);
        assert!(discover(p.dir.path()).is_empty());
    }
}

mod schema {
    use super::*;

    /// `pipelines/schema.json` must be what `json_schema()` generates.
    #[test]
    fn schema_json_is_current() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pipelines/schema.json");
        let generated = format!(
            "{}\n",
            serde_json::to_string_pretty(&fracflow_loader::json_schema(
                &fracflow_executors::Registry::builtin()
            ))
            .expect("schema serializes")
        );
        if std::env::var_os("UPDATE_SCHEMA").is_some_and(|v| v == "1") {
            std::fs::write(&path, &generated).expect("write pipelines/schema.json");
            return;
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "pipelines/schema.json is stale: run `UPDATE_SCHEMA=1 cargo test -p fracflow-loader schema`"
        );
    }

    #[test]
    fn schema_describes_every_kind_and_top_level_key() {
        let schema = fracflow_loader::json_schema(&fracflow_executors::Registry::builtin());
        let text = schema.to_string();
        for key in [
            "pipeline", "base", "uses", "params", "sweep", "exclude", "variants", "targets",
            "nodes",
        ] {
            assert!(
                schema["properties"].get(key).is_some(),
                "top-level key `{key}` missing"
            );
        }
        assert_eq!(schema["additionalProperties"], json!(false));
        assert!(text.contains(r#""const":"command""#) && text.contains(r#""const":"group""#));
    }
}

mod scale {
    use super::*;

    /// 10 000 sweep points: one instance each for a per-point node, a 1:1 dependent, a fan-in and a fan-out.
    #[test]
    fn ten_thousand_instances_expand_quickly() {
        let values: Vec<String> = (0..10_000).map(|i| i.to_string()).collect();
        let yaml = format!(
            "pipeline: big\nsweep: {{i: [{}]}}\nnodes:\n  build:\n    kind: command\n    run: make\n  measure:\n    kind: command\n    foreach: [i]\n    deps: [build]\n    run: ./measure {{i}} {{i * 2}}\n  check:\n    kind: command\n    foreach: [i]\n    deps: [measure]\n    run: ./check {{i}}\n  plot:\n    kind: group\n    deps: [check]\n",
            values.join(", ")
        );
        let p = one(&yaml);
        let started = std::time::Instant::now();
        let loaded = p.load("pipelines/p.yaml");
        eprintln!("10 000-point pipeline loaded in {:?}", started.elapsed());
        assert_eq!(loaded.graph.len(), 1 + 10_000 + 10_000 + 1);
        assert_eq!(deps(&loaded, "check[i=9999]"), ["measure[i=9999]"]);
        assert_eq!(deps(&loaded, "measure[i=5]"), ["build"]);
        assert_eq!(deps(&loaded, "plot").len(), 10_000);
        assert_eq!(
            run(&loaded, "measure[i=4000]"),
            &json!("./measure 4000 8000")
        );
    }

    /// 10 000 declared nodes in a chain.
    #[test]
    fn ten_thousand_declared_nodes_load() {
        let mut yaml =
            String::from("pipeline: chain\nnodes:\n  n0:\n    kind: command\n    run: echo 0\n");
        for i in 1..10_000 {
            yaml.push_str(&format!(
                "  n{i}:\n    kind: command\n    deps: [n{}]\n    run: echo {i}\n",
                i - 1
            ));
        }
        let p = one(&yaml);
        let started = std::time::Instant::now();
        let loaded = p.load("pipelines/p.yaml");
        eprintln!("10 000-node pipeline loaded in {:?}", started.elapsed());
        assert_eq!(loaded.graph.len(), 10_000);
        assert_eq!(deps(&loaded, "n9999"), ["n9998"]);
    }

    /// 30 000 declared nodes are about 300 000 YAML nodes: more than the parser's fixed default allows, within
    /// what the guard allows a file of this size.
    #[test]
    fn thirty_thousand_declared_nodes_pass_the_size_scaled_node_guard() {
        let mut yaml =
            String::from("pipeline: chain\nnodes:\n  n0: {kind: command, run: echo 0}\n");
        for i in 1..30_000 {
            yaml.push_str(&format!(
                "  n{i}: {{kind: command, deps: [n{}], run: echo {i}}}\n",
                i - 1
            ));
        }
        let loaded = one(&yaml).load("pipelines/p.yaml");
        assert_eq!(loaded.graph.len(), 30_000);
    }

    /// A few lines that would expand into billions of nodes are refused, not expanded.
    #[test]
    fn an_alias_bomb_is_refused_at_its_position() {
        let mut yaml =
            String::from("pipeline: bomb\nparams:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..9 {
            let previous = format!("*a{}", level - 1);
            yaml.push_str(&format!(
                "  a{level}: &a{level} [{}]\n",
                vec![previous; 10].join(", ")
            ));
        }
        yaml.push_str("nodes:\n  n: {kind: command, run: echo}\n");
        let p = one(&yaml);
        let shown = p.errors("pipelines/p.yaml", &p.opts());
        assert!(
            shown.contains("budget breached") && shown.contains("pipelines/p.yaml:"),
            "{shown}"
        );
    }
}

mod repository {
    use super::*;
    use fracflow_loader::discover;

    /// Every pipeline of this repository loads (with each of its variants too).
    #[test]
    fn the_repository_pipelines_load() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let found = discover(&root);
        assert!(
            found.iter().any(|e| e.name == "demo"),
            "pipelines/demo.yaml is discovered"
        );
        for entry in found {
            if let Some(problems) = &entry.problems {
                panic!("{} has problems:\n{problems}", entry.path.display());
            }
            let text = std::fs::read_to_string(&entry.path).expect("readable");
            let mut variants = vec![None];
            if text.contains("smoke:") {
                variants.push(Some("smoke".to_owned()));
            }
            for variant in variants {
                let opts = LoadOptions {
                    root: root.clone(),
                    variant: variant.clone(),
                    ..LoadOptions::default()
                };
                if let Err(diagnostics) =
                    load(&entry.path, &opts, &fracflow_executors::Registry::builtin())
                {
                    // Prebuilt images are not in the repository (`bitstreams/` holds their manifests): a pipeline
                    // that flashes one loads once its user has the file, and says which file when it is missing.
                    let text = diagnostics.to_string();
                    let errors = text.matches("error:").count();
                    let missing_images = text
                        .matches("error: missing input file `bitstreams/")
                        .count();
                    assert!(
                        errors > 0 && errors == missing_images,
                        "{} (variant {variant:?}) does not load:\n{diagnostics}",
                        entry.path.display()
                    );
                }
            }
        }
    }

    #[test]
    fn the_demo_pipeline_expands_as_documented() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let opts = LoadOptions {
            root,
            variant: Some("smoke".to_owned()),
            ..LoadOptions::default()
        };
        let loaded = load(
            Path::new("pipelines/demo.yaml"),
            &opts,
            &fracflow_executors::Registry::builtin(),
        )
        .unwrap_or_else(|d| panic!("{d}"));
        assert_eq!(
            ids(&loaded),
            [
                "data[size_mib=4]",
                "measure[size_mib=4,tool=sha256sum]",
                "measure[size_mib=4,tool=b2sum]",
                "table"
            ]
        );
        assert_eq!(
            deps(&loaded, "measure[size_mib=4,tool=b2sum]"),
            ["data[size_mib=4]"]
        );
        assert_eq!(loaded.pipeline.targets["table"], ["table"]);
    }
}

mod testbed_adaptation {
    use super::*;

    const PIPELINE: &str = r#"
pipeline: p
params: {d: 30, skip: 10, latency: last_piece, small: 2, computed: "{d} - 1"}
nodes:
  a:
    kind: command
    run: "echo {d} {skip} {latency} {small} {computed}"
"#;

    #[test]
    fn caps_lower_declared_numbers_and_overrides_replace_values() {
        let project = one(PIPELINE);
        let mut opts = project.opts();
        opts.caps = [
            ("d", 4.0),
            ("skip", 1.0),
            ("small", 5.0),
            ("undeclared", 1.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        opts.overrides = [("latency".to_owned(), json!("from_send"))].into();
        let loaded = project.load_with("pipelines/p.yaml", &opts);
        let run = first_run(&loaded);
        // A number above its cap is lowered, one below is kept, a computed param follows the lowered one.
        assert_eq!(run, json!("echo 4 1 from_send 2 3"));
        let lowered: Vec<(String, serde_json::Value, serde_json::Value)> = loaded
            .adapted
            .iter()
            .map(|a| (a.param.clone(), a.from.clone(), a.to.clone()))
            .collect();
        assert_eq!(
            lowered,
            vec![
                ("d".to_owned(), json!(30), json!(4)),
                ("skip".to_owned(), json!(10), json!(1)),
                (
                    "latency".to_owned(),
                    json!("last_piece"),
                    json!("from_send")
                ),
            ]
        );
    }

    #[test]
    fn a_variant_below_the_cap_is_kept() {
        let project = one(&format!(
            "{PIPELINE}variants:\n  smoke: {{params: {{d: 2}}}}\n"
        ));
        let mut opts = project.opts();
        opts.variant = Some("smoke".to_owned());
        opts.caps = [("d".to_owned(), 4.0)].into();
        let loaded = project.load_with("pipelines/p.yaml", &opts);
        assert_eq!(first_run(&loaded), json!("echo 2 10 last_piece 2 1"));
        assert!(loaded.adapted.is_empty());
    }
}

/// Files a kind's configuration names (`Executor::implied_inputs`) join the node's inputs like `inputs:` entries.
mod implied_inputs {
    use super::*;
    use fracflow_core::{Executor, Job, KindInfo, Kinds, NodeError, Outcome};

    const TRACE: &str = "app,sleep_time,request_size,response_size\n1,0,512,64\n";

    #[test]
    fn a_measure_nodes_trace_file_is_an_input_even_with_glob_characters_in_its_name() {
        let p = Project::new(&[
            ("data/t[1].csv", TRACE),
            // What the glob `t[1].csv` would match instead.
            ("data/t1.csv", TRACE),
            (
                "pipelines/p.yaml",
                "pipeline: p\nnodes:\n  replay:\n    kind: measure\n    addr: \"127.0.0.1:9\"\n    \
                 fperf: -t rr -n 1 -m 512\n    trace: {file: \"data/t[1].csv\"}\n",
            ),
        ]);
        let loaded = p.load("pipelines/p.yaml");
        assert_eq!(
            spec(&loaded, "replay").inputs,
            [p.root().join("data/t[1].csv")]
        );
    }

    /// A kind that names a file it reads, whether or not it exists.
    struct Reads(&'static str);

    impl Executor for Reads {
        fn implied_inputs(&self, _spec: &NodeSpec, _root: &Path) -> Vec<String> {
            vec![self.0.to_owned()]
        }
        fn info(&self, _spec: &NodeSpec) -> Result<KindInfo, NodeError> {
            Ok(KindInfo {
                version: 1,
                tools: Default::default(),
                cacheable: true,
            })
        }
        fn describe(&self, _spec: &NodeSpec) -> String {
            "reads".to_owned()
        }
        fn execute(&self, _job: &Job<'_>) -> Result<Outcome, NodeError> {
            Ok(Outcome::default())
        }
    }

    struct OneKind(Reads);

    impl Kinds for OneKind {
        fn executor(&self, kind: &str) -> Option<&dyn Executor> {
            (kind == "reads").then_some(&self.0 as &dyn Executor)
        }
    }

    #[test]
    fn an_implied_input_that_cannot_be_read_is_an_error_naming_it() {
        let p = Project::new(&[(
            "pipelines/p.yaml",
            "pipeline: p\nnodes:\n  r:\n    kind: reads\n",
        )]);
        let error = load(
            Path::new("pipelines/p.yaml"),
            &p.opts(),
            &OneKind(Reads("data/gone.csv")),
        )
        .expect_err("a missing implied input")
        .to_string();
        assert!(
            error.contains(
                "input `data/gone.csv` of node `r` (named by its configuration) cannot be read"
            ),
            "{error}"
        );
    }
}

/// The remembered load (`.fracflow/loaded/`) is reused only while what it was made from holds.
mod remembered {
    use super::*;

    fn node<'a>(loaded: &'a Loaded, id: &str) -> &'a NodeSpec {
        loaded
            .graph
            .specs()
            .find(|n| n.id == id)
            .expect("node exists")
    }

    #[test]
    fn a_changed_source_a_new_input_file_and_a_broken_memo_are_each_seen() {
        let p = Project::new(&[
            (
                "pipelines/p.yaml",
                "pipeline: p\nnodes:\n  a:\n    kind: command\n    run: echo one\n    inputs: [\"data/*.txt\"]\n",
            ),
            ("data/a.txt", "a"),
        ]);
        let first = p.load("pipelines/p.yaml");
        assert_eq!(node(&first, "a").inputs.len(), 1);
        let memo_dir = p.root().join(".fracflow/loaded");
        assert!(
            std::fs::read_dir(&memo_dir).is_ok_and(|d| d.count() >= 1),
            "the load was remembered"
        );
        let again = p.load("pipelines/p.yaml");
        assert_eq!(again.pipeline, first.pipeline, "reused unchanged");

        // A file a glob now names too.
        std::fs::write(p.root().join("data/b.txt"), "b").expect("write");
        assert_eq!(node(&p.load("pipelines/p.yaml"), "a").inputs.len(), 2);

        // An edited source.
        std::fs::write(
            p.root().join("pipelines/p.yaml"),
            "pipeline: p\nnodes:\n  a:\n    kind: command\n    run: echo two\n    inputs: [\"data/*.txt\"]\n",
        )
        .expect("write");
        assert_eq!(
            node(&p.load("pipelines/p.yaml"), "a").config.get("run"),
            Some(&json!("echo two"))
        );

        // A memo that is garbage is a miss, never an error.
        for memo in std::fs::read_dir(&memo_dir).expect("memo dir").flatten() {
            std::fs::write(memo.path(), "{not json").expect("break the memo");
        }
        assert_eq!(
            node(&p.load("pipelines/p.yaml"), "a").config.get("run"),
            Some(&json!("echo two"))
        );

        // So is one whose bytes changed where they still parse (a write torn by power loss): its checksum fails.
        let mut altered = 0;
        for memo in std::fs::read_dir(&memo_dir).expect("memo dir").flatten() {
            let mut bytes = std::fs::read(memo.path()).expect("read the memo");
            if let Some(at) = bytes.windows(8).position(|w| w == b"echo two") {
                bytes[at + 5..at + 8].copy_from_slice(b"TWO");
                std::fs::write(memo.path(), &bytes).expect("alter the memo");
                altered += 1;
            }
        }
        assert!(altered > 0, "a memo names the command");
        assert_eq!(
            node(&p.load("pipelines/p.yaml"), "a").config.get("run"),
            Some(&json!("echo two"))
        );

        // A source that is now wrong is reported as it would be without a memo.
        std::fs::write(
            p.root().join("pipelines/p.yaml"),
            "pipeline: p\nnodes:\n  a:\n    kind: comand\n    run: echo\n",
        )
        .expect("write");
        let shown = p.errors("pipelines/p.yaml", &p.opts());
        assert!(shown.contains("unknown kind `comand`"), "{shown}");
    }

    #[test]
    fn a_file_a_kind_checks_is_checked_again_on_reuse() {
        let p = Project::new(&[
            (
                "pipelines/p.yaml",
                "pipeline: p\nnodes:\n  w:\n    kind: weave\n    shell: hw/shell.yaml\n    units: hw/units\n",
            ),
            ("hw/shell.yaml", "name: frac\ncells: []\n"),
            ("hw/units/.keep", ""),
        ]);
        p.load("pipelines/p.yaml");
        std::fs::remove_file(p.root().join("hw/shell.yaml")).expect("remove");
        let shown = p.errors("pipelines/p.yaml", &p.opts());
        assert!(
            shown.contains("shell `hw/shell.yaml` is not a file"),
            "{shown}"
        );
    }

    #[test]
    fn other_options_are_another_memo() {
        let p = one(
            "pipeline: p\nparams: {x: 1}\nnodes:\n  a:\n    kind: command\n    run: echo {x}\n",
        );
        assert_eq!(
            node(&p.load("pipelines/p.yaml"), "a").config.get("run"),
            Some(&json!("echo 1"))
        );
        let mut opts = p.opts();
        opts.set.insert("x".to_owned(), json!(2));
        assert_eq!(
            node(&p.load_with("pipelines/p.yaml", &opts), "a")
                .config
                .get("run"),
            Some(&json!("echo 2"))
        );
        assert_eq!(
            node(&p.load("pipelines/p.yaml"), "a").config.get("run"),
            Some(&json!("echo 1"))
        );
    }
}
