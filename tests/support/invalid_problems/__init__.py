"""The invalid-problem corpus: mutations of official suite problems, applied at test time."""
