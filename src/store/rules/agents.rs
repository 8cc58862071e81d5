//! Agents: an agent's memory and its appended segments.

use crate::store::dump::{AgentRecord, SegmentRecord};
use crate::store::tx::Txn;
use anyhow::Result;

use super::ensure_open;

/// Replaces an agent's memory, creating the agent if needed.
pub fn remember(mut tx: Txn<'_>, name: &str, scope: &str, memory: &str, now: &str) -> Result<()> {
    ensure_open(&mut *tx)?;
    tx.put_agent(&AgentRecord {
        name: name.to_string(),
        scope: Some(scope.to_string()),
        memory: Some(memory.to_string()),
        created_at: Some(now.to_string()),
        updated_at: Some(now.to_string()),
    })?;
    tx.commit()
}

/// Appends a segment and returns its number: 1, 2, ... with no gap and no duplicate however
/// many processes append at once (the number is read and used under the agent's lock).
pub fn append_segment(
    mut tx: Txn<'_>,
    name: &str,
    scope: &str,
    prompt: &str,
    summary: &str,
    now: &str,
) -> Result<i64> {
    ensure_open(&mut *tx)?;
    tx.touch_agent(name, scope, now)?;
    let n = tx.next_segment_number(name)?;
    tx.put_segment(&SegmentRecord {
        agent_name: Some(name.to_string()),
        segment_number: Some(n),
        timestamp: Some(now.to_string()),
        prompt: Some(prompt.to_string()),
        summary: Some(summary.to_string()),
        // A run's store records the newest record itself (a trigger).
        at_record: None,
    })?;
    tx.commit()?;
    Ok(n)
}
