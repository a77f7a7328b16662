"""Local reward functions r_k(x_k, y_k) (paper Sections 4 and 6).

pairs    PreferencePair, JSONL save/append/load (resumable), datasets form
collect  collect_pairs / collect_all: candidates of C_k scored by downstream Monte Carlo
text     what the backbone reads for (component, inputs, output): declared views, head+tail cuts
backbone loading any HF encoder or causal LM (default: the shipped all-MiniLM-L6-v2), pooling, LoRA
model    LocalRewardModel: shared backbone + one linear head per component; score(), save(), load()
train    pairwise loss, split_by_input (train/dev/test), train_stage1 (early stopping), adapt_stage2
buffer   ReplayBuffer: per-component replay mixed into Stage 2 batches
metrics  pairwise ranking accuracy (per component, macro mean) and the results.json `lrf` block
judge    the LLM-judge baseline on the same test pairs (unparsable = tie, parse rate reported)
stage    Stage 1 in a run folder: collect, split, train, the alignment report (Table 4)

Submodules are imported directly (torch loads only where a model is needed).
"""
