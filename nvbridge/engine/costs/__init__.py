"""What an op costs: FLOPs and bytes from its name, shapes and arguments (torch's FlopCounterMode
formulas), and the dtype it computed in (recorded, or read from its kernels' names)."""
