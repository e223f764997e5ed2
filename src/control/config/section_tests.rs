//! The `control:` section and Dynamo's control variables, loaded from a file and an
//! environment.

use std::time::Duration;

use crate::config::tests::{env, load_yaml, no_env, ok, problems};
use crate::config::*;

#[test]
fn the_section_loads_renders_back_and_names_a_bad_value() {
    let c = ok("control:\n  allow_unauthenticated: true\n  timeout: 5s\n");
    assert!(c.control.allow_unauthenticated);
    assert_eq!(c.control.timeout, Duration::from_secs(5));
    assert_eq!(ok(&c.to_string()).control, c.control);
    let issues = problems("control:\n  timeout: 0s\n  nope: 1\n", &no_env());
    let shown: Vec<String> = issues.iter().map(ToString::to_string).collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert!(
        shown[0].contains(":2:") && shown[0].contains("control.timeout"),
        "{shown:?}"
    );
    assert!(
        shown[1].contains(":3:") && shown[1].contains("control.nope"),
        "{shown:?}"
    );
    let issues = problems("", &env(&[(DYN_LORA_ENABLED, "yes")]));
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0].field, DYN_LORA_ENABLED);
    let c = load_yaml("", &env(&[(DYN_LORA_ENABLED, "TRUE")]));
    assert!(c.expect("valid").control.lora);
}

#[test]
fn the_incidents_section_loads_renders_back_and_names_a_bad_value() {
    let dir = std::env::temp_dir().join(format!("sysport-incidents-cfg-{}", std::process::id()));
    let yaml = format!(
        "incidents:\n  dir: {}\n  keep: 7\n  max_bytes: 1MiB\n",
        dir.display()
    );
    let c = ok(&yaml);
    assert_eq!(c.incidents.dir.as_deref(), Some(dir.as_path()));
    assert_eq!(c.incidents.keep, 7);
    assert_eq!(c.incidents.max_bytes, 1 << 20);
    assert_eq!(ok(&c.to_string()).incidents, c.incidents);
    assert_eq!(ok("").incidents, IncidentsConfig::default());
    let issues = problems(
        "incidents:\n  keep: 0\n  max_bytes: lots\n  dri: x\n",
        &no_env(),
    );
    let shown: Vec<String> = issues.iter().map(ToString::to_string).collect();
    assert_eq!(shown.len(), 3, "{shown:?}");
    assert!(
        shown[0].contains(":2:") && shown[0].contains("incidents.keep"),
        "{shown:?}"
    );
    assert!(shown[1].contains(":3:") && shown[1].contains("incidents.max_bytes"));
    assert!(shown[2].contains(":4:") && shown[2].contains("incidents.dri"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn incidents_processes_name_an_upstream_and_a_pattern_that_compiles() {
    let upstreams = "upstreams:\n  - name: vllm\n  - name: sglang\n    engine: sglang\n";
    let c = ok(&format!(
        "{upstreams}incidents:\n  processes:\n    vllm: '^vllm serve|VLLM::$'\n"
    ));
    let want = vec![("vllm".to_owned(), "^vllm serve|VLLM::$".to_owned())];
    assert_eq!(c.incidents.processes, want);
    assert_eq!(ok(&c.to_string()).incidents, c.incidents);
    let issues = problems(
        &format!(
            "{upstreams}incidents:\n  processes:\n    vlm: python\n    sglang: '(unclosed'\n    vllm: ''\n"
        ),
        &no_env(),
    );
    let shown: Vec<String> = issues.iter().map(ToString::to_string).collect();
    assert_eq!(shown.len(), 3, "{shown:?}");
    assert!(
        shown[0].contains(":7:") && shown[0].contains("incidents.processes.vlm"),
        "{shown:?}"
    );
    assert!(shown[0].contains("no upstream is named `vlm` (vllm, sglang)"));
    assert!(shown[1].contains(":8:") && shown[1].contains("incidents.processes.sglang"));
    assert!(shown[1].contains("not a regular expression"), "{shown:?}");
    assert!(shown[2].contains(":9:") && shown[2].contains("must not be empty"));
}
