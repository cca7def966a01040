"""The fusion pattern table, as data: anchors (`table.ANCHORS`), post-op slots (`table.SLOTS`)
and activations (`activations.ACTIVATIONS`), combined into `relax.dpl` patterns for
`FuseOpsByPattern`; `switches` turns families off."""
