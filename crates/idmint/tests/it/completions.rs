//! `idmint completions SHELL` and the hidden `idmint man DIR`, which
//! scripts/dist ships (scripts/dist-check installs and tries them).

use crate::idmint;

#[test]
fn completions_name_every_command_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F _idmint"),
        ("zsh", "#compdef idmint"),
        ("fish", "complete -c idmint"),
    ] {
        let out = idmint(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for command in ["serve", "decode", "segment", "completions"] {
            assert!(script.contains(command), "{shell}: no {command}");
        }
    }
    let out = idmint(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcsh"));
}

#[test]
fn man_writes_a_page_per_command_and_none_for_itself() {
    let dir = tempfile::tempdir().unwrap();
    let out = idmint(&["man", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let mut pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    for page in [
        "idmint.1",
        "idmint-serve.1",
        "idmint-segment-raise.1",
        "idmint-completions.1",
    ] {
        assert!(pages.iter().any(|p| p == page), "no {page} in {pages:?}");
    }
    assert!(!pages.iter().any(|p| p == "idmint-man.1"), "{pages:?}");
    let serve = std::fs::read_to_string(dir.path().join("idmint-serve.1")).unwrap();
    assert!(serve.contains(".TH idmint-serve 1"), "{serve}");
}
