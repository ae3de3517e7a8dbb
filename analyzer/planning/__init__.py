"""Plans and what-ifs built on an analysis."""
