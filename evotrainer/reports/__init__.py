"""What the command line and the dashboard both show: campaign summaries, recorded reviews, a skill's
history, and the documented shape of every --json document.
"""
