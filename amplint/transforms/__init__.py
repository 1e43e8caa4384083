"""libcst transformations that carry out fixes; rules decide, these rewrite."""
