//! docs/hosts.md: every host configuration it shows parses, and every MCP server it names starts
//! as the host would start it and lists the tools of its role, through the reference client
//! (tests/fixtures/hosts_client.py); every prose-state tool a Claude Code subagent definition
//! allows is one its server lists.

use crate::common::{self, Project, BIN};
use serde_json::Value;
use std::io::Write;

fn page() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/hosts.md")).unwrap()
}

/// The page's fenced blocks as (language, text), in order.
fn blocks(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), String::new())),
            (Some(_), Some(_)) => out.push(open.take().unwrap()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "docs/hosts.md: an unclosed code block");
    out
}

/// The role a server's arguments give it.
fn role(args: &[Value]) -> &str {
    let at = args
        .iter()
        .position(|a| a == "--role")
        .unwrap_or_else(|| panic!("a server without --role: {args:?}"));
    args[at + 1].as_str().unwrap()
}

#[test]
fn every_host_configuration_starts_and_lists_its_tools() {
    let text = page();
    let all = blocks(&text);
    let configs: Vec<Value> = all
        .iter()
        .filter(|(lang, _)| lang == "json" || lang == "toml")
        .map(|(lang, body)| {
            if lang == "json" {
                serde_json::from_str::<Value>(body)
                    .unwrap_or_else(|e| panic!("a JSON block does not parse ({e}):\n{body}"));
            }
            serde_json::json!({"lang": lang, "text": body})
        })
        .collect();
    let langs: Vec<&str> = configs
        .iter()
        .map(|c| c["lang"].as_str().unwrap())
        .collect();
    assert!(
        langs.contains(&"json") && langs.contains(&"toml"),
        "docs/hosts.md shows a .mcp.json and a config.toml: {langs:?}"
    );
    let Some(python) = common::test_python("the host configurations test", common::Needs::Mcp)
    else {
        return;
    };
    let p = Project::new();
    let run = p.init();
    // The records a pinned subagent session's `--execution-id` names (a session pinned to a
    // record the run lacks does not start).
    for index in 1..=4 {
        run.cmd()
            .args([
                "exec-append",
                "--index",
                &index.to_string(),
                "--text",
                "s",
                "--status",
                "executing",
            ])
            .assert()
            .success();
    }
    let substitutions = serde_json::json!({
        "/path/to/project": p.root().to_str().unwrap(),
        "20261123-004507-3kmcew": run.id,
    });
    let mut child = common::mcp_client(&p, &python, "hosts_client.py")
        .arg(BIN)
        .arg(substitutions.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(&configs).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "a configuration of docs/hosts.md failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let servers: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let blocks_seen: std::collections::BTreeSet<u64> = servers
        .iter()
        .map(|s| s["block"].as_u64().unwrap())
        .collect();
    assert_eq!(blocks_seen.len(), configs.len(), "{servers:?}");
    let mut listed = std::collections::BTreeMap::new();
    for s in &servers {
        let tools: Vec<&str> = s["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        let name = s["server"].as_str().unwrap();
        match role(s["args"].as_array().unwrap()) {
            "vm" => assert!(
                tools.contains(&"init") && tools.contains(&"finish"),
                "{name}: {tools:?}"
            ),
            "subagent" => assert!(
                tools.contains(&"bind") && !tools.contains(&"finish"),
                "{name}: {tools:?}"
            ),
            other => panic!("{name}: role {other}"),
        }
        listed.insert(
            name.to_string(),
            tools.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
        );
    }
    // A Claude Code subagent definition (.claude/agents/NAME.md) allows tools by name,
    // mcp__SERVER__TOOL: each names a server shown above and a tool it lists.
    let mut allowed = 0;
    for (lang, body) in all.iter().filter(|(lang, _)| lang == "markdown") {
        let Some(line) = body.lines().find(|l| l.starts_with("tools:")) else {
            panic!("a {lang} block without tools:\n{body}");
        };
        for tool in line["tools:".len()..].split(',').map(str::trim) {
            let Some(rest) = tool.strip_prefix("mcp__") else {
                continue;
            };
            let (server, name) = rest.split_once("__").unwrap();
            let tools = listed
                .get(server)
                .unwrap_or_else(|| panic!("{tool}: no server {server} on the page"));
            assert!(tools.iter().any(|t| t == name), "{tool}: not listed");
            allowed += 1;
        }
    }
    assert!(
        allowed > 0,
        "no subagent definition allows a prose-state tool"
    );
}
