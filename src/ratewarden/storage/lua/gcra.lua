-- gcra.lua: GCRA over every layer of one decision, all or nothing.
-- Mirrors ratewarden.algorithms.gcra.check, composed by the prelude's layered();
-- the state (state_read, state_write) and the step (gcra_check) live in the prelude.
-- KEYS[i]   "tat_us frac": the theoretical arrival time tat_us + frac/n
-- ARGV[3..] per layer: n, d, capacity (emission interval d/n microseconds)
-- Reply     see _prelude.lua

return layered(state_read, gcra_check, state_write, 3)
