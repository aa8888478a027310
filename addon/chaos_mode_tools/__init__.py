"""The development tools beside the runtime: the z.ai simulator (`sim`), the benchmarks (`bench`), the test
rigs (`devtools`). They import `chaos_mode`; it never imports them, and its wheel does not ship them."""
