"""Analysis of models and checkpoints. Every function takes a model or a run directory (a path) and returns a
pandas DataFrame, or a typed result (a dataclass with the numbers) whose `.frame()` is the DataFrame.

    from mixit_lab.analysis.heads import head_scores            # per head: induction, previous/duplicate/current/first-token, copying, label
    from mixit_lab.analysis.attention import attention_stats    # per head: entropy, distance, sink/diagonal mass, rank, input dependence
    from mixit_lab.analysis.memory import memorized_bits        # accuracy, memorized bits, bits per trainable / total parameter
    from mixit_lab.analysis.signal import signal_propagation    # per variant x width x depth x layer: token cosine and covariance
    from mixit_lab.analysis.ablation import head_ablation       # per head: loss / accuracy (or your metric) when it is ablated
    from mixit_lab.analysis.patching import patch_heads         # per head: how much patching it from a clean run restores
    from mixit_lab.analysis.components import component_effects # per layer, MLP and head: attribution and ablation

Typed results: head_scores -> HeadScores; source_attention_scores, task_induction_scores -> SourceScores;
head_ablation -> HeadAblation; patch_heads, head_patching -> HeadPatching; component_effects -> ComponentEffects.
The others return DataFrames.

`mixit analyze CHECKPOINT...` (mixit_lab.analysis.analyze.analyze_checkpoint) runs all that apply to a checkpoint and caches the
results by the checkpoint's hash. Submodules are imported on use, so `import analysis` is cheap.
"""
