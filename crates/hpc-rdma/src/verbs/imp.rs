//! The verbs runtime (feature `verbs`). Not run on hardware: see the module docs.

use super::*;

pub(super) fn probe() -> Result<DeviceInfo> {
    let list = ibverbs::devices()
        .map_err(|e| Error::NoDevice(format!("listing RDMA devices failed: {e}")))?;
    let dev = list
        .iter()
        .next()
        .ok_or_else(|| Error::NoDevice("no RDMA devices".into()))?;
    let name = dev
        .name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unknown".into());
    Ok(DeviceInfo { name })
}

/// The verbs backend.
pub(crate) struct Verbs;

pub(super) fn connect(
    _shared: std::sync::Arc<crate::core::Shared>,
    world: &hpc_runtime::World,
    peers: &[usize],
    _device: Option<DeviceInfo>,
) -> Result<Option<Box<dyn crate::Backend>>> {
    world.allgather(&[])?;
    if peers.is_empty() {
        return Ok(None);
    }
    Err(Error::NoDevice("verbs connection not available".into()))
}
