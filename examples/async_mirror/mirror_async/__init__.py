"""An asyncio operator on the official client's asyncio API: each ConfigMap labelled as a source
gets a mirror `<name>-mirror` holding the same data."""
