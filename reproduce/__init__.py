"""`mixit reproduce`: the study's tables and figures from one command.

    mixit reproduce --preset smoke            # every variant on every algorithmic task, toy size (~2 min)
    mixit reproduce --preset quick            # the qualitative findings on a 2-core CPU (25-34 min)
    mixit reproduce --preset paper            # the paper's sizes and step counts (GPU)

Presets are YAML files in reproduce/presets/; pipeline.py runs them (train -> analyze -> signal ->
speed -> figures -> report) and report.py turns the runs into the paper's tables and findings.
"""
