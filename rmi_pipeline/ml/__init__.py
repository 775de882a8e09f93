"""Model-agnostic method code with no orchestration in it: training, the gate, scoring, and the
methods by which a champion teaches its successor. Each function takes plain values and small settings groups."""
