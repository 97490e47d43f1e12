"""Pure torch loss math: no Ray, no DeepSpeed; unit-tested on hand-computed values."""
