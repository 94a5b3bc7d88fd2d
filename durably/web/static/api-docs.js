// Starts Swagger UI on the API's docs page (/api/docs), from a file of its own so that the
// page needs no inline script. Swagger UI is served by durably (swagger-ui-bundle.js, from
// swagger-ui-dist; its license beside it), and its validator badge, which would send the
// schema to validator.swagger.io, is off: the page asks nothing of another site.
window.ui = SwaggerUIBundle({
  url: document.getElementById("swagger-ui").dataset.schema,
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
