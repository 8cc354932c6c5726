// An Apache Iceberg REST catalog for the interop tests: Iceberg's own RESTCatalogServlet and
// RESTCatalogAdapter (iceberg-core's test jar) over a JdbcCatalog on SQLite, on Jetty 12.
// Files are read and written on the local disk (no Hadoop).
//
//   java -cp <classes>:<iceberg-rest jars> RestServer <port> <dir> [<client_id>:<secret>]
//
// With a client id and secret the catalog requires OAuth2 client credentials, as Polaris and
// managed catalogs do: POST /v1/oauth/tokens (grant_type=client_credentials, the id and
// secret in the form) answers a bearer token valid for an hour, and every other request
// without a token it issued gets 401.
import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.Files;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

public class RestServer {
  /** FileIO for local paths and file: URIs. */
  public static class LocalFileIO implements FileIO {
    private static File f(String p) {
      return p.startsWith("file:") ? new File(URI.create(p)) : new File(p);
    }

    public InputFile newInputFile(String p) {
      return Files.localInput(f(p));
    }

    public OutputFile newOutputFile(String p) {
      return Files.localOutput(f(p));
    }

    public void deleteFile(String p) {
      f(p).delete();
    }
  }

  /** The catalog servlet behind an OAuth2 client-credentials check. */
  public static class OAuthServlet extends RESTCatalogServlet {
    private final String clientId;
    private final String secret;
    private final Set<String> issued = ConcurrentHashMap.newKeySet();

    OAuthServlet(RESTCatalogAdapter adapter, String clientId, String secret) {
      super(adapter);
      this.clientId = clientId;
      this.secret = secret;
    }

    private static void json(HttpServletResponse resp, int status, String body) throws IOException {
      resp.setStatus(status);
      resp.setContentType("application/json");
      resp.getWriter().write(body);
    }

    @Override
    protected void service(HttpServletRequest req, HttpServletResponse resp)
        throws jakarta.servlet.ServletException, IOException {
      if (req.getRequestURI().endsWith("/v1/oauth/tokens")) {
        if ("client_credentials".equals(req.getParameter("grant_type"))
            && clientId.equals(req.getParameter("client_id"))
            && secret.equals(req.getParameter("client_secret"))) {
          String token = "tok-" + UUID.randomUUID();
          issued.add(token);
          json(resp, 200, "{\"access_token\":\"" + token + "\",\"token_type\":\"bearer\","
              + "\"issued_token_type\":\"urn:ietf:params:oauth:token-type:access_token\","
              + "\"expires_in\":3600}");
        } else {
          json(resp, 401, "{\"error\":\"invalid_client\",\"error_description\":"
              + "\"unknown client or wrong secret\"}");
        }
        return;
      }
      String auth = req.getHeader("Authorization");
      if (auth == null || !auth.startsWith("Bearer ") || !issued.contains(auth.substring(7))) {
        json(resp, 401, "{\"error\":{\"message\":\"a bearer token from /v1/oauth/tokens is "
            + "required\",\"type\":\"NotAuthorizedException\",\"code\":401}}");
        return;
      }
      super.service(req, resp);
    }
  }

  public static void main(String[] args) throws Exception {
    int port = Integer.parseInt(args[0]);
    String dir = args[1];
    new File(dir, "warehouse").mkdirs();
    JdbcCatalog catalog = new JdbcCatalog();
    catalog.initialize(
        "strata_test",
        Map.of(
            CatalogProperties.URI, "jdbc:sqlite:" + dir + "/catalog.db",
            CatalogProperties.WAREHOUSE_LOCATION, dir + "/warehouse",
            CatalogProperties.FILE_IO_IMPL, LocalFileIO.class.getName(),
            "jdbc.schema-version", "V1"));
    ServletContextHandler ctx = new ServletContextHandler();
    ctx.setContextPath("/");
    RESTCatalogAdapter adapter = new RESTCatalogAdapter(catalog);
    RESTCatalogServlet servlet;
    if (args.length > 2) {
      String[] credential = args[2].split(":", 2);
      servlet = new OAuthServlet(adapter, credential[0], credential[1]);
    } else {
      servlet = new RESTCatalogServlet(adapter);
    }
    ctx.addServlet(new ServletHolder(servlet), "/*");
    Server server = new Server();
    ServerConnector conn = new ServerConnector(server);
    conn.setHost("127.0.0.1");
    conn.setPort(port);
    server.addConnector(conn);
    server.setHandler(ctx);
    server.start();
    System.out.println("ready");
    server.join();
  }
}
